"""Scoring: the one way to turn prompts and completions into per-token log-probs and entropy.

Everything that needs a completion's log-probs under a model — the update's forward (with
gradients), π_old and the reference (without: `frozen_logprobs`), the KL reward penalty, SFT —
builds a batch with `honed.models.batching.build_batch` and calls `score`. Two batch layouts
exist:

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

The model's body runs through `lean_forward` when it supports it (Llama-family decoders), else
through its own decoder; both give the same hidden states to float rounding. Only completion
positions reach the output head (the prompt is never projected to the vocabulary), and the
vocabulary is never held for the whole batch at once (`head_logprobs`): logits are computed
`LOGITS_CHUNK_ELEMENTS` at a time, upcast to float32, reduced to the sampled token's log-prob
and the entropy, and dropped; above `RECOMPUTE_ABOVE_ELEMENTS` logits in a batch, the backward
pass recomputes each chunk (`torch.utils.checkpoint`) instead of keeping it. The naive
computation (the whole float32 log-softmax) is the reference the tests and `bench/memory.py`
compare against (`tests/numerics.py`).

`score` moves a batch that is not on the model's device yet (one copy per tensor).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import MethodType

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache, PreTrainedModel

from honed.models.batching import PrefixBatch, ScoreBatch, TokenBatch, positions_of
from honed.models.device import model_device
from honed.models.dropout import eval_mode
from honed.models.kvcache import cache_argument
from honed.models.lean import checkpointing, lean_forward, supports_lean
from honed.models.lora import AdapterFreeReference

# Logits computed at once, per chunk of completion tokens: 2**24 float32 values are 64 MiB, about
# 110 tokens at Qwen's 151,936-token vocabulary, 340 at SmolLM2's 49,152.
LOGITS_CHUNK_ELEMENTS = 1 << 24
# Above this many logits in one batch (1 GiB in float32), the backward pass recomputes each
# chunk's logits rather than keeping them all: one more pass through the output head buys a
# peak that no longer grows with the vocabulary. Below it, keeping them is cheaper, and a
# laptop-sized batch (SmolLM2's quickstart: 1,024 tokens, 50 M logits) pays nothing.
RECOMPUTE_ABOVE_ELEMENTS = 1 << 28
# Config attributes of models whose head does more than a linear projection (Gemma 2's logit
# soft-capping, Cohere's and Granite's logit scaling): their logits come from their own forward.
_HEAD_EXTRAS = ("final_logit_softcapping", "logit_scale", "logits_scaling")

Past = DynamicCache | list[tuple[torch.Tensor, torch.Tensor]]
# The method a sharded model scores through (`enable_root_scoring`).
ROOT_SCORE = "honed_score"


@dataclass
class Scores:
    """Per-token results for a batch's completions, all [B, C]: `logprobs` (with gradient when
    the model ran with it), `entropy` (None unless asked for; never differentiable) and `mask`
    (the loss mask the batch was built with: 1 where a token is trained on)."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    mask: torch.Tensor


def score(
    model: PreTrainedModel, batch: ScoreBatch, temperature: float = 1.0, with_entropy: bool = False
) -> Scores:
    """Log-probs of the batch's completion tokens under `model`, and optionally their entropy.

    Logits are divided by the sampling temperature, as during sampling, so that on-policy the
    scores equal the behaviour log-probs; log-probs and entropy are float32 whatever the
    model's dtype. Gradients flow when autograd is on; callers that want none wrap the call in
    `torch.inference_mode()`. `model` may be a peft model (its adapters apply, or not inside
    `disable_adapter()`), or a sharded one (`enable_root_scoring`).
    """
    through_root = getattr(model, ROOT_SCORE, None)
    if through_root is not None:
        logprobs, entropy, mask = through_root(batch, temperature, with_entropy)
        return Scores(logprobs, entropy, mask)
    return _score(model, batch, temperature, with_entropy)


def frozen_logprobs(
    target: torch.nn.Module | AdapterFreeReference, batch: ScoreBatch, temperature: float
) -> torch.Tensor:
    """`score`'s log-probs without gradient and with dropout off: π_old, the reference and the
    KL reward penalty, which must not change with the update pass's dropout. `target` is a
    model, or a LoRA run's reference (`AdapterFreeReference`: the policy with its adapters off).
    Whatever mode the model was in, it is in again afterwards."""
    with _scope(target) as model, eval_mode(model), torch.inference_mode():
        logp = score(model, batch, temperature).logprobs
    return logp.clone()


def _scope(target: torch.nn.Module | AdapterFreeReference) -> AbstractContextManager:
    """The model to score with: `target` itself, or the policy with its adapters off."""
    if isinstance(target, AdapterFreeReference):
        return target.scope()
    return nullcontext(target)


def enable_root_scoring(model: torch.nn.Module) -> None:
    """Give `model` a method `ROOT_SCORE(batch, temperature, with_entropy)` that `score` calls
    instead of reaching into the model itself.

    For a model sharded with FSDP (`honed.distributed.fsdp`): its root's parameters (embeddings,
    output head) are gathered only around a forward of the root, so the sharding registers this
    method as one (`register_fsdp_forward_method`), and the output head's chunks run inside it.
    Rows always get their own copy of their prompt (a `TokenBatch`): one pass through each
    layer per call, as FSDP's per-layer hooks expect. It returns a tuple, whose tensors FSDP
    can hook for the backward pass.
    """

    def root_score(self, batch: ScoreBatch, temperature: float, with_entropy: bool):
        if isinstance(batch, PrefixBatch):
            batch = batch.as_tokens()
        scores = _score(self, batch, temperature, with_entropy)
        # FSDP hooks the outputs for the backward pass: fresh tensors, never views of others,
        # so that no in-place operation downstream can bypass the hook
        entropy = None if scores.entropy is None else scores.entropy.clone()
        return scores.logprobs.clone(), entropy, scores.mask.clone()

    setattr(model, ROOT_SCORE, MethodType(root_score, model))


def _score(
    model: PreTrainedModel, batch: ScoreBatch, temperature: float, with_entropy: bool
) -> Scores:
    """`score` for a model that is not sharded, or inside a sharded one's root forward."""
    causal = causal_lm(model)
    batch = batch.to(model_device(causal))
    if isinstance(batch, PrefixBatch) and not _continues_cache(causal):
        batch = batch.as_tokens()
    head = plain_head(causal)
    if head is None:  # a head with extras: the model's own logits, reduced chunk by chunk
        logits = _token_states(causal, batch, logits=True)
        logprobs, entropy = _logits_logprobs(logits, batch.completion_ids, temperature)
    else:
        hidden = _token_states(causal, batch, logits=False)
        logprobs, entropy = head_logprobs(
            head, hidden, batch.completion_ids, temperature, with_entropy
        )
    return Scores(logprobs, entropy if with_entropy else None, batch.completion_mask)


def causal_lm(model: torch.nn.Module) -> PreTrainedModel:
    """The causal LM inside a peft wrapper (its LoRA layers in place), or `model` itself."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def plain_head(model: PreTrainedModel) -> torch.nn.Module | None:
    """The output head when logits are exactly `head(hidden)`, else None."""
    if any(getattr(model.config, extra, None) for extra in _HEAD_EXTRAS):
        return None
    return model.get_output_embeddings()


def _continues_cache(model: PreTrainedModel) -> bool:
    """Whether a forward can continue from a prompt's keys and values: not through
    `transformers`' checkpointed layers in training, which drop the cache."""
    if supports_lean(model):
        return True
    return not (checkpointing(model) and model.training and torch.is_grad_enabled())


def _token_states(model: PreTrainedModel, batch: ScoreBatch, logits: bool) -> torch.Tensor:
    """Final hidden states [B, C, H] (or, with `logits`, the logits [B, C, V]) of the positions
    predicting each completion token: the last prompt position and the completion's own, but
    its last."""
    width = batch.completion_width
    if isinstance(batch, TokenBatch):
        out, _ = _forward(
            model,
            batch.input_ids[:, :-1],
            batch.position_ids[:, :-1],
            batch.attention_mask[:, :-1],
            keep=width,
            logits=logits,
        )
        return out
    prompt_positions = positions_of(batch.prompt_mask)
    first, past = _forward(
        model,
        batch.prompt_ids,
        prompt_positions,
        batch.prompt_mask,
        keep=1,
        cache=True,
        logits=logits,
    )
    rows = batch.row_prompt
    # The last prompt position predicts the first completion token; the rest come from the
    # completion tokens themselves (all but the last, whose prediction is never scored).
    states = [first[rows]]
    if width > 1:
        key_mask = torch.cat([batch.prompt_mask[rows], batch.completion_attention[:, :-1]], dim=1)
        steps = torch.arange(width - 1, device=key_mask.device)
        positions = batch.prompt_mask.sum(-1)[rows, None] + steps
        out, _ = _forward(
            model,
            batch.completion_ids[:, :-1],
            positions,
            key_mask,
            _expand(past, rows),
            logits=logits,
        )
        states.append(out)
    return torch.cat(states, dim=1)


def _forward(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    key_mask: torch.Tensor,
    past: Past | None = None,
    keep: int = 0,
    cache: bool = False,
    logits: bool = False,
) -> tuple[torch.Tensor, Past | None]:
    """One pass: the final hidden states (or with `logits`, the logits) of the last `keep`
    positions (all if 0) and, when `cache` or `past` is given, the keys and values to continue
    from. `key_mask` covers past and new positions."""
    if supports_lean(model) and not logits:
        return lean_forward(model, input_ids, positions, key_mask, past, keep or None)
    use_cache = cache or past is not None
    if use_cache and past is None:
        past = DynamicCache(config=model.config)
    inputs = {
        "input_ids": input_ids,
        "attention_mask": key_mask,
        "position_ids": positions,
        "use_cache": use_cache,
    }
    if logits:
        return model(**inputs, **cache_argument(model, past), logits_to_keep=keep).logits, past
    hidden = model.base_model(**inputs, **cache_argument(model.base_model, past))
    hidden = hidden.last_hidden_state
    return (hidden[:, -keep:] if keep else hidden), past


def head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of `tokens` [B, C] under the logits `head(hidden)` tempered (hidden [B, C, H]),
    and their entropy (never differentiable), both float32 [B, C], without the [B, C, V]
    logits ever existing at once: chunks of `LOGITS_CHUNK_ELEMENTS` logits, recomputed in the
    backward pass when the batch holds more than `RECOMPUTE_ABOVE_ELEMENTS`.
    """
    rows, width, size = hidden.shape
    vocab = head.weight.shape[0]
    flat, flat_tokens = hidden.reshape(rows * width, size), tokens.reshape(-1)
    step = max(1, LOGITS_CHUNK_ELEMENTS // vocab)
    recompute = torch.is_grad_enabled() and rows * width * vocab > RECOMPUTE_ABOVE_ELEMENTS
    logprobs, entropies = [], []
    for start in range(0, rows * width, step):
        args = (head, flat[start : start + step], flat_tokens[start : start + step])
        if recompute:
            lp, ent = checkpoint(_chunk, *args, temperature, with_entropy, use_reentrant=False)
        else:
            lp, ent = _chunk(*args, temperature, with_entropy)
        logprobs.append(lp)
        entropies.append(ent)
    entropy = torch.cat(entropies).view(rows, width) if with_entropy else None
    return torch.cat(logprobs).view(rows, width), entropy


def _chunk(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One chunk of `head_logprobs`: tempered float32 logits [N, V] reduced to [N] values."""
    logits = head(hidden).float()
    return _reduce(logits, tokens, temperature, with_entropy)


def _reduce(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(token) = logit − logsumexp (no [N, V] log-softmax is kept for the backward pass),
    and the entropy logsumexp − Σ p·logit, computed without gradient."""
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - lse
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logp, entropy


def _logits_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`head_logprobs` for logits a model computed itself ([B, C, V], its dtype): reduced a
    chunk of positions at a time, so the float32 copy never spans the batch."""
    rows, width, vocab = logits.shape
    flat, flat_tokens = logits.reshape(rows * width, vocab), tokens.reshape(-1)
    step = max(1, LOGITS_CHUNK_ELEMENTS // vocab)
    parts = [
        _reduce(flat[s : s + step].float(), flat_tokens[s : s + step], temperature, True)
        for s in range(0, rows * width, step)
    ]
    logp = torch.cat([lp for lp, _ in parts]).view(rows, width)
    return logp, torch.cat([ent for _, ent in parts]).view(rows, width)


def _expand(past: Past, rows: torch.Tensor) -> Past:
    """Each prompt's keys and values for the rows that continue it (`index_select`, which is
    differentiable: the gradients of a prompt's rows sum into it)."""
    if isinstance(past, DynamicCache):
        past.reorder_cache(rows)
        return past
    return [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in past]
