"""Batching: the one place where token lists become padded tensors.

Sampling, scoring, the GRPO update and SFT all build their batches here, so that padding,
position ids and shared prompts mean the same thing everywhere:

- prompts are left-padded (`left_pad`), so every prompt ends in the same column and a
  completion starts right after it; position ids count real tokens only (`positions_of`);
- completions, their loss masks and anything else per completion token (behaviour log-probs,
  token weights) are right-padded to the batch's completion width (`right_pad`);
- a GRPO group repeats its prompt, so rows are mapped to their distinct prompts
  (`distinct_prompts`), which sampling and scoring then run through the model once.

The two layouts a completion is scored in are `TokenBatch` (each row its own prompt) and
`PrefixBatch` (each distinct prompt once); `build_batch` picks one, `make_batch` always builds
the first. Batches are built on the CPU (from Python lists) and moved to the model's device in
one copy per tensor (`TokenBatch.to`, `PrefixBatch.to`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch

# One row of per-token values: a list (token ids, a mask, log-probs) or a 1-D tensor (weights).
Row = Sequence[int] | Sequence[float] | torch.Tensor


def left_pad(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows left-padded with `pad_id` ([len(rows), longest]) and their 0/1 mask; built on the
    CPU and moved to `device` (when given) in one copy each."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device="cpu")
    mask = torch.zeros((len(rows), width), dtype=torch.long, device="cpu")
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.as_tensor(r, dtype=torch.long, device="cpu")
            mask[i, width - len(r) :] = 1
    if device is not None:
        ids, mask = ids.to(device), mask.to(device)
    return ids, mask


def right_pad(
    rows: Sequence[Row],
    pad: float,
    width: int,
    dtype: torch.dtype = torch.long,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Rows padded on the right with `pad` to `width` columns, as one [len(rows), width] tensor
    of `dtype`; built on the CPU and moved to `device` (when given) in one copy."""
    out = torch.full((len(rows), width), pad, dtype=dtype, device="cpu")
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = torch.as_tensor(r, dtype=dtype, device="cpu")
    return out if device is None else out.to(device)


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded attention mask: 0 at each row's first real token (and at
    its padding, which nothing attends to)."""
    return (mask.cumsum(-1) - 1).clamp_min(0)


def distinct_prompts(prompts: Sequence[Sequence[int]]) -> tuple[list[tuple[int, ...]], list[int]]:
    """The distinct prompts in order of first appearance, and which one each row is: a GRPO
    group repeats its prompt, which sampling and scoring then run through the model once."""
    index: dict[tuple[int, ...], int] = {}
    row_prompt = [index.setdefault(tuple(p), len(index)) for p in prompts]
    return list(index), row_prompt


def micro_batches(n: int, size: int | None) -> list[list[int]]:
    """The indices of `n` rows in consecutive micro-batches of `size` (all in one if None)."""
    size = size or max(1, n)
    return [list(range(s, min(n, s + size))) for s in range(0, n, size)]


@dataclass
class TokenBatch:
    """Prompts left-padded to P, completions right-padded to C: inputs of shape [B, P + C].

    The layout keeps every completion in the last C positions, so the forward pass computes
    logits only there (`logits_to_keep`), whatever the prompt lengths.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor

    @property
    def completion_width(self) -> int:
        return self.completion_ids.shape[1]

    def to(self, device: torch.device) -> TokenBatch:
        return _moved(self, device)


@dataclass
class PrefixBatch:
    """Distinct prompts [G, P] (left-padded), completions [B, C] (right-padded), and which
    prompt each row continues ([B] indices into the prompts)."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    row_prompt: torch.Tensor
    completion_ids: torch.Tensor
    completion_attention: torch.Tensor
    completion_mask: torch.Tensor

    @property
    def completion_width(self) -> int:
        return self.completion_ids.shape[1]

    def to(self, device: torch.device) -> PrefixBatch:
        return _moved(self, device)

    def as_tokens(self) -> TokenBatch:
        """The same rows as a `TokenBatch` (each row with its own copy of its prompt), for a
        forward that cannot continue from a prompt's cache (gradient checkpointing through
        `transformers`' layers, which drops the cache in training)."""
        prompt_ids = self.prompt_ids[self.row_prompt]
        prompt_mask = self.prompt_mask[self.row_prompt]
        attention = torch.cat([prompt_mask, self.completion_attention], dim=1)
        return TokenBatch(
            input_ids=torch.cat([prompt_ids, self.completion_ids], dim=1),
            attention_mask=attention,
            position_ids=positions_of(attention),
            completion_ids=self.completion_ids,
            completion_mask=self.completion_mask,
        )


def _moved(batch, device: torch.device):
    """`batch` with every tensor on `device` (the same object when they are there already)."""
    tensors = {f.name: getattr(batch, f.name) for f in fields(batch)}
    if all(t.device == device for t in tensors.values()):
        return batch
    return replace(batch, **{k: t.to(device, non_blocking=True) for k, t in tensors.items()})


ScoreBatch = TokenBatch | PrefixBatch


def make_batch(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    masks: Sequence[Sequence[int]],
    pad_id: int,
) -> TokenBatch:
    """Pack (prompt, completion, loss mask) triples into one padded `TokenBatch`."""
    p_ids, p_mask = left_pad(prompts, pad_id)
    width = max(1, max(len(c) for c in completions))
    c_ids = right_pad(completions, pad_id, width)
    c_mask = right_pad(masks, 0, width)
    c_attn = right_pad([[1] * len(c) for c in completions], 0, width)
    attention = torch.cat([p_mask, c_attn], dim=1)
    positions = positions_of(attention)
    return TokenBatch(
        input_ids=torch.cat([p_ids, c_ids], dim=1),
        attention_mask=attention,
        position_ids=positions,
        completion_ids=c_ids,
        completion_mask=c_mask,
    )


def build_batch(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    masks: Sequence[Sequence[int]],
    pad_id: int,
) -> ScoreBatch:
    """A `PrefixBatch` when some rows repeat a prompt (GRPO groups), else a `TokenBatch`."""
    distinct, row_prompt = distinct_prompts(prompts)
    if len(distinct) == len(prompts) or not all(prompts):
        return make_batch(prompts, completions, masks, pad_id)
    prompt_ids, prompt_mask = left_pad(distinct, pad_id)
    width = max(1, max(len(c) for c in completions))
    return PrefixBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        row_prompt=torch.as_tensor(row_prompt, dtype=torch.long, device="cpu"),
        completion_ids=right_pad(completions, pad_id, width),
        completion_attention=right_pad([[1] * len(c) for c in completions], 0, width),
        completion_mask=right_pad(masks, 0, width),
    )
