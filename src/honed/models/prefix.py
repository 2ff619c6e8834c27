"""Scoring completions that share prompts: each distinct prompt is run through the model once.

A GRPO group is `num_generations` completions of one prompt. Scoring them as independent
sequences recomputes the prompt for every completion; here the distinct prompts of a batch are
run once (with gradients), their key/value cache is expanded to the rows that continue them,
and the completions attend to it. The gradient reaching the weights through a shared prompt is
the sum of its rows' contributions, exactly as in the plain forward, so the two agree to float
rounding (a test checks log-probs and gradients). With the prompt a large share of each
sequence (short answers to long questions), this removes most of the update's work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from honed.models.lean import lean_forward, supports_lean
from honed.models.policy import (
    TokenBatch,
    completion_logprobs,
    left_pad,
    make_batch,
    token_logprobs,
)


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


ScoreBatch = TokenBatch | PrefixBatch


def right_pad(rows: Sequence[Sequence[int]], pad: int, width: int) -> torch.Tensor:
    out = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    return out


def build_batch(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    masks: Sequence[Sequence[int]],
    pad_id: int,
) -> ScoreBatch:
    """A prefix-sharing batch when some rows repeat a prompt (GRPO groups), else a plain one."""
    distinct: dict[tuple[int, ...], int] = {}
    row_prompt = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
    if len(distinct) == len(prompts) or not all(prompts):
        return make_batch(prompts, completions, masks, pad_id)
    prompt_ids, prompt_mask = left_pad(list(distinct), pad_id)
    width = max(1, max(len(c) for c in completions))
    return PrefixBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        row_prompt=torch.as_tensor(row_prompt, dtype=torch.long),
        completion_ids=right_pad(completions, pad_id, width),
        completion_attention=right_pad([[1] * len(c) for c in completions], 0, width),
        completion_mask=right_pad(masks, 0, width),
    )


def batch_logprobs(
    model: PreTrainedModel, batch: ScoreBatch, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, C] of the completion tokens (with grad), and optionally their entropy."""
    if isinstance(batch, TokenBatch):
        return completion_logprobs(model, batch, temperature, with_entropy)
    return prefix_logprobs(model, batch, temperature, with_entropy)


def prefix_logprobs(
    model: PreTrainedModel, batch: PrefixBatch, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`completion_logprobs` for a `PrefixBatch`: every distinct prompt is computed once."""
    forward = _lean_pass if supports_lean(model) else _transformers_pass
    prompt_positions = (batch.prompt_mask.cumsum(-1) - 1).clamp_min(0)
    first, past = forward(model, batch.prompt_ids, prompt_positions, batch.prompt_mask, keep=1)
    rows = batch.row_prompt
    # The last prompt position predicts the first completion token; the rest come from the
    # completion tokens themselves (all but the last, whose prediction is never scored).
    logits = [first[rows]]
    width = batch.completion_width
    if width > 1:
        key_mask = torch.cat([batch.prompt_mask[rows], batch.completion_attention[:, :-1]], dim=1)
        positions = batch.prompt_mask.sum(-1)[rows, None] + torch.arange(width - 1)
        out, _ = forward(
            model, batch.completion_ids[:, :-1], positions, key_mask, _expand(past, rows)
        )
        logits.append(out)
    return token_logprobs(torch.cat(logits, dim=1), batch.completion_ids, temperature, with_entropy)


Past = DynamicCache | list[tuple[torch.Tensor, torch.Tensor]]


def _transformers_pass(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    key_mask: torch.Tensor,
    past: Past | None = None,
    keep: int = 0,
) -> tuple[torch.Tensor, Past]:
    """One pass through the model's own forward: logits (the last `keep`, all if 0), cache."""
    cache = past if past is not None else DynamicCache(config=model.config)
    out = model(
        input_ids=input_ids,
        attention_mask=key_mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=keep,
    )
    return out.logits, cache


def _lean_pass(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    key_mask: torch.Tensor,
    past: Past | None = None,
    keep: int = 0,
) -> tuple[torch.Tensor, Past]:
    """The same pass through `lean_forward`."""
    return lean_forward(model, input_ids, positions, key_mask, past, keep or None)


def _expand(past: Past, rows: torch.Tensor) -> Past:
    """Each prompt's keys and values for the rows that continue it (`index_select`, which is
    differentiable: the gradients of a prompt's rows sum into it)."""
    if isinstance(past, DynamicCache):
        past.reorder_cache(rows)
        return past
    return [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in past]
