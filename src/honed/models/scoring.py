"""Scoring: the one way to turn prompts and completions into per-token log-probs and entropy.

Everything that needs a completion's log-probs under a model — the update's forward (with
gradients), π_old and the reference (without), the KL reward penalty, SFT — builds a batch
with `build_batch` and calls `score`. Two batch layouts exist:

- `TokenBatch`: each row is its prompt (left-padded) followed by its completion
  (right-padded), so every completion sits in the last C positions and logits are computed
  there only;
- `PrefixBatch`: when rows repeat a prompt (a GRPO group is `num_generations` completions of
  one prompt), each distinct prompt is run through the model once, its key/value cache is
  expanded to the rows that continue it, and the completions attend to it. The gradient
  reaching the weights through a shared prompt is the sum of its rows' contributions, exactly
  as in the plain forward, so the two layouts agree to float rounding (tests check log-probs
  and gradients). With the prompt a large share of each sequence, this removes most of the
  update's work.

The model runs through `lean_forward` when it supports it (Llama-family decoders), else
through its own `forward`; both give the same logits to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel

from honed.models.generation import distinct_prompts, left_pad, positions_of
from honed.models.lean import lean_forward, supports_lean

Past = DynamicCache | list[tuple[torch.Tensor, torch.Tensor]]


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


@dataclass
class Scores:
    """Per-token results for a batch's completions, all [B, C]: `logprobs` (with gradient when
    the model ran with it), `entropy` (None unless asked for; never differentiable) and `mask`
    (the loss mask the batch was built with: 1 where a token is trained on)."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    mask: torch.Tensor


def right_pad(rows: Sequence[Sequence[int]], pad: int, width: int) -> torch.Tensor:
    """Rows padded on the right with `pad` to `width` columns, as one [len(rows), width] tensor."""
    out = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    return out


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
        row_prompt=torch.as_tensor(row_prompt, dtype=torch.long),
        completion_ids=right_pad(completions, pad_id, width),
        completion_attention=right_pad([[1] * len(c) for c in completions], 0, width),
        completion_mask=right_pad(masks, 0, width),
    )


def score(
    model: PreTrainedModel, batch: ScoreBatch, temperature: float = 1.0, with_entropy: bool = False
) -> Scores:
    """Log-probs of the batch's completion tokens under `model`, and optionally their entropy.

    Logits are divided by the sampling temperature, as during sampling, so that on-policy the
    scores equal the behaviour log-probs. Gradients flow when autograd is on; callers that
    want none wrap the call in `torch.inference_mode()`.
    """
    if isinstance(batch, TokenBatch):
        logits = _token_logits(model, batch)
    else:
        logits = _prefix_logits(model, batch)
    logprobs, entropy = token_logprobs(logits, batch.completion_ids, temperature, with_entropy)
    return Scores(logprobs, entropy, batch.completion_mask)


def token_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of `tokens` [B, C] under `logits` [B, C, V] tempered, and their entropy."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def _token_logits(model: PreTrainedModel, batch: TokenBatch) -> torch.Tensor:
    """Logits [B, C, V] predicting each completion token: the C positions before it."""
    width = batch.completion_width
    logits, _ = _forward(
        model, batch.input_ids, batch.position_ids, batch.attention_mask, keep=width + 1
    )
    return logits[:, :-1, :]


def _prefix_logits(model: PreTrainedModel, batch: PrefixBatch) -> torch.Tensor:
    """`_token_logits` for a `PrefixBatch`: every distinct prompt is computed once."""
    prompt_positions = positions_of(batch.prompt_mask)
    first, past = _forward(
        model, batch.prompt_ids, prompt_positions, batch.prompt_mask, keep=1, cache=True
    )
    rows = batch.row_prompt
    # The last prompt position predicts the first completion token; the rest come from the
    # completion tokens themselves (all but the last, whose prediction is never scored).
    logits = [first[rows]]
    width = batch.completion_width
    if width > 1:
        key_mask = torch.cat([batch.prompt_mask[rows], batch.completion_attention[:, :-1]], dim=1)
        positions = batch.prompt_mask.sum(-1)[rows, None] + torch.arange(width - 1)
        out, _ = _forward(
            model, batch.completion_ids[:, :-1], positions, key_mask, _expand(past, rows)
        )
        logits.append(out)
    return torch.cat(logits, dim=1)


def _forward(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    key_mask: torch.Tensor,
    past: Past | None = None,
    keep: int = 0,
    cache: bool = False,
) -> tuple[torch.Tensor, Past | None]:
    """One pass: logits of the last `keep` positions (all if 0) and, when `cache` or `past` is
    given, the keys and values to continue from. `key_mask` covers past and new positions."""
    if supports_lean(model):
        return lean_forward(model, input_ids, positions, key_mask, past, keep or None)
    use_cache = cache or past is not None
    if use_cache and past is None:
        past = DynamicCache(config=model.config)
    out = model(
        input_ids=input_ids,
        attention_mask=key_mask,
        position_ids=positions,
        past_key_values=past,
        use_cache=use_cache,
        logits_to_keep=keep,
    )
    return out.logits, past


def _expand(past: Past, rows: torch.Tensor) -> Past:
    """Each prompt's keys and values for the rows that continue it (`index_select`, which is
    differentiable: the gradients of a prompt's rows sum into it)."""
    if isinstance(past, DynamicCache):
        past.reorder_cache(rows)
        return past
    return [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in past]
