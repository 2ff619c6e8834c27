"""Sampling completions with the behaviour log-prob of every token: prefill, decode, stop.

A lean loop over the model's forward with a KV cache rather than `generate`: it must return the
log-probability of every sampled token under the tempered distribution, and it draws each row's
randomness from that row's own seed (inverse-CDF sampling with per-row uniforms), so a
completion does not depend on which other prompts share its batch, or on which worker runs it.

The steps, each a function below:

1. `row_uniforms`: every row's random numbers, from its seed alone;
2. `prefill`: each distinct prompt run once (a GRPO group shares its prompt's KV cache);
3. `decode`: one token per step for the rows still going; stopped rows leave the batch in bulk;
4. `finish`: completions cut at their first stop token, decoded to text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel

from honed.config import TrainerConfig
from honed.models.batching import distinct_prompts, left_pad, positions_of
from honed.models.device import model_device
from honed.models.kvcache import InPlaceLayer, cache_argument, sampling_cache
from honed.models.lean import LeanDecoder, supports_lean_decoding
from honed.types import Sample


@dataclass(frozen=True)
class SamplingParams:
    """`temperature: 0` means greedy decoding (evaluation); log-probs are then at temperature 1.
    `share_prefix`: prefill the batch's common prompt prefix once (`shared_prefix`)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    share_prefix: bool = False

    @classmethod
    def of(cls, settings: TrainerConfig) -> SamplingParams:
        """The rollouts' sampling as the trainer's settings ask (every backend and worker)."""
        return cls(
            settings.temperature,
            settings.top_p,
            settings.max_completion_length,
            settings.share_prefix,
        )


@dataclass
class Decoding:
    """A batch being decoded: the rows still in it and what they need for the next step."""

    cache: object  # the KV cache (`sampling_cache`), reordered as rows leave
    logits: torch.Tensor  # [rows, vocab] for the next token
    attention: torch.Tensor  # [rows, every position a row can reach]
    next_pos: torch.Tensor  # [rows] position of the next token
    width: int  # positions in use so far
    uniforms: torch.Tensor | None  # [rows, steps]; None when greedy
    lean: LeanDecoder | None  # the lean decoding step, for models that support it
    active: torch.Tensor  # [rows] the original row of each row still in the batch
    done: torch.Tensor  # [rows] rows that have stopped
    bias: torch.Tensor | None = None  # the lean step's padding mask, rebuilt when rows leave
    # tokens and log-probs per run of steps over the same rows, written out at the end:
    # scattering each step's into [batch, steps] costs as much as sampling it
    runs: list[tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]] = field(
        default_factory=list
    )


def row_uniforms(
    seeds: Sequence[int], steps: int, params: SamplingParams, device: torch.device | None = None
) -> torch.Tensor | None:
    """[rows, steps] uniforms, row i's from `seeds[i]` alone; `None` for greedy decoding.

    Drawn by CPU generators whatever the device (the same numbers on any machine), then moved.
    """
    if params.temperature == 0:
        return None
    uniforms = torch.stack(
        [
            torch.rand(steps, generator=torch.Generator().manual_seed(int(s)), device="cpu")
            for s in seeds
        ]
    )
    return uniforms if device is None else uniforms.to(device)


# A common prefix shorter than this is run with the rest of each prompt: a separate forward
# costs more than it saves.
MIN_SHARED_PREFIX = 32


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all of several distinct prompts share (at least
    `MIN_SHARED_PREFIX`, else 0), keeping one token of each after it for its next logits.

    Multi-turn rollouts repeat the system message, the tools and any example conversation in
    every row, and every turn prompts with the whole conversation so far: most of each prompt
    is the same tokens, which one forward then computes once instead of once per row.
    """
    if len(prompts) < 2:
        return 0
    shortest = min(len(p) for p in prompts)
    first = prompts[0]
    n = 0
    while n < shortest - 1 and all(p[n] == first[n] for p in prompts):
        n += 1
    return n if n >= MIN_SHARED_PREFIX else 0


def prefix_cache(
    model: PreTrainedModel, prefix: Sequence[int], rows: int, capacity: int
) -> DynamicCache:
    """A sampling cache for `rows` rows holding `prefix`, run through the model once (empty
    when there is no prefix)."""
    cache = sampling_cache(model.config, capacity)
    if prefix:
        device = model_device(model)
        model(
            input_ids=torch.as_tensor([list(prefix)], dtype=torch.long, device=device),
            position_ids=torch.arange(len(prefix), device=device)[None],
            **cache_argument(model, cache),
            use_cache=True,
            logits_to_keep=1,
        )
        cache.reorder_cache(torch.zeros(rows, dtype=torch.long, device=device))
    return cache


def prefill(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    steps: int,
    pad_id: int,
    uniforms: torch.Tensor | None,
    share_prefix: bool = False,
) -> Decoding:
    """Run each distinct prompt once (with `share_prefix`, their common prefix once:
    `shared_prefix`) and give every row its prompt's cache and next logits.

    Without `share_prefix` a row's computation is the same whatever else is in its batch, and
    so is its sample. With it, rows sharing a prefix are computed in two pieces, which rounds
    differently in the last bits: at temperature 1 over a 49k vocabulary, inverse-CDF sampling
    then draws another tail token for a few rows in a hundred (the same distribution)."""
    batch = len(prompts)
    device = model_device(model)
    distinct, row_prompt = distinct_prompts(prompts)
    shared = shared_prefix(distinct) if share_prefix else 0
    input_ids, suffix_attention = left_pad([p[shared:] for p in distinct], pad_id, device)
    # [shared prefix | left padding | each prompt's own tokens]: the prefix is written to the
    # cache once and repeated, the rest is run as a left-padded batch after it
    attention = torch.cat([suffix_attention.new_ones((len(distinct), shared)), suffix_attention], 1)
    positions = positions_of(attention)[:, shared:]
    cache = prefix_cache(model, distinct[0][:shared], len(distinct), attention.shape[1] + steps)
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        **cache_argument(model, cache),
        use_cache=True,
        logits_to_keep=1,
    )
    logits = out.logits[:, -1, :].float()
    next_pos = positions[:, -1] + 1
    lean = None
    if supports_lean_decoding(model) and all(type(layer) is InPlaceLayer for layer in cache.layers):
        lean = LeanDecoder(model, int(next_pos.max()) + steps)
    if len(distinct) < batch:
        index = torch.as_tensor(row_prompt, dtype=torch.long, device=device)
        cache.reorder_cache(index)
        logits, attention, next_pos = logits[index], attention[index], next_pos[index]
    width = attention.shape[1]
    # every position a row can reach, so that each step takes a view instead of a copy
    attention = torch.cat([attention, attention.new_ones((batch, steps))], dim=1)
    active = torch.arange(batch, device=device)
    return Decoding(
        cache=cache,
        logits=logits,
        attention=attention,
        next_pos=next_pos,
        width=width,
        uniforms=uniforms,
        lean=lean,
        active=active,
        done=torch.zeros(batch, dtype=torch.bool, device=device),
        runs=[(active, [], [])],
    )


def decode(
    model: PreTrainedModel, state: Decoding, steps: int, params: SamplingParams, stop: torch.Tensor
) -> None:
    """Sample up to `steps` tokens per row into `state.runs`, until every row has stopped."""
    for t in range(steps):
        tok, lp = pick(
            state.logits, None if state.uniforms is None else state.uniforms[:, t], params
        )
        state.runs[-1][1].append(tok)
        state.runs[-1][2].append(lp)
        state.done |= torch.isin(tok, stop)
        finished = int(state.done.sum())
        if t == steps - 1 or finished == len(state.done):
            return
        # Dropping rows copies the cache, so stopped rows ride along until they are an
        # eighth of the batch: a few wasted rows cost less than a copy at every stop.
        if finished * 8 >= len(state.done):
            tok = _drop_stopped(state, tok)
        state.width += 1
        state.logits = _step(model, state, tok)
        state.next_pos = state.next_pos + 1


def _drop_stopped(state: Decoding, tok: torch.Tensor) -> torch.Tensor:
    """Take the stopped rows out of the batch; the tokens of the rows that stay."""
    keep = (~state.done).nonzero().squeeze(1)
    state.cache.reorder_cache(keep)
    state.active, state.attention = state.active[keep], state.attention[keep]
    state.next_pos = state.next_pos[keep]
    state.uniforms = None if state.uniforms is None else state.uniforms[keep]
    state.done, state.bias = state.done[keep], None
    state.runs.append((state.active, [], []))
    return tok[keep]


def _step(model: PreTrainedModel, state: Decoding, tok: torch.Tensor) -> torch.Tensor:
    """The next logits [rows, vocab] after feeding `tok`: the lean step or the model's forward."""
    if state.lean is not None:
        if state.bias is None:
            state.bias = state.lean.padding_bias(state.attention)
        bias = state.bias[..., : state.width]
        return state.lean.step(tok, state.next_pos, bias, state.cache.layers).float()
    out = model(
        input_ids=tok[:, None],
        attention_mask=state.attention[:, : state.width],
        position_ids=state.next_pos[:, None],
        **cache_argument(model, state.cache),
        use_cache=True,
    )
    return out.logits[:, -1, :].float()


def finish(
    prompts: Sequence[Sequence[int]],
    state: Decoding,
    steps: int,
    stop_ids: Sequence[int],
    pad_id: int,
    detokenize: Callable[[list[int]], str],
) -> list[Sample]:
    """Each row's completion up to and including its first stop token (or `steps` tokens),
    assembled on the CPU (one copy from the device per run of steps)."""
    batch = len(prompts)
    tokens = torch.full((batch, steps), pad_id, dtype=torch.long, device="cpu")
    logprobs = torch.zeros((batch, steps), dtype=torch.float32, device="cpu")
    first = 0
    for rows, run_tokens, run_logprobs in state.runs:
        last = first + len(run_tokens)
        rows = rows.cpu()
        tokens[rows, first:last] = torch.stack(run_tokens, dim=1).cpu()
        logprobs[rows, first:last] = torch.stack(run_logprobs, dim=1).cpu()
        first = last
    # A stopped row still in the batch went on sampling; what it wrote after the stop is cut.
    stops = torch.isin(tokens, torch.as_tensor(list(stop_ids), dtype=torch.long, device="cpu"))
    lengths = torch.where(stops.any(1), stops.int().argmax(1) + 1, steps)
    samples = []
    for i in range(batch):
        n = int(lengths[i])
        ids = tokens[i, :n].tolist()
        ended = bool(n > 0 and ids[-1] in stop_ids)
        samples.append(
            Sample(
                prompt_ids=list(prompts[i]),
                completion_ids=ids,
                logprobs=logprobs[i, :n].tolist(),
                text=detokenize(ids[:-1] if ended else ids),
                truncated=not ended,
            )
        )
    return samples


@torch.inference_mode()
def generate(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    seeds: Sequence[int],
    params: SamplingParams,
    stop_ids: Sequence[int],
    pad_id: int,
    detokenize: Callable[[list[int]], str],
) -> list[Sample]:
    """Sample one completion per prompt; row i's randomness comes from `seeds[i]` alone."""
    if len(prompts) != len(seeds):
        raise ValueError("generate needs exactly one seed per prompt")
    if not prompts:
        return []
    steps = params.max_tokens
    device = model_device(model)
    uniforms = row_uniforms(seeds, steps, params, device)
    state = prefill(model, prompts, steps, pad_id, uniforms, params.share_prefix)
    stop = torch.as_tensor(list(stop_ids), dtype=torch.long, device=device)
    decode(model, state, steps, params, stop)
    return finish(prompts, state, steps, stop_ids, pad_id, detokenize)


def pick(
    logits: torch.Tensor, uniforms: torch.Tensor | None, params: SamplingParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose the next token per row and return it with its log-prob.

    The log-prob is under the full tempered distribution (before top-p truncation), the
    distribution the trainer scores against; top-p only restricts which tokens can be drawn.
    """
    if uniforms is None:
        tok = logits.argmax(-1)
        lp = F.log_softmax(logits, dim=-1).gather(-1, tok[:, None]).squeeze(-1)
        return tok, lp
    logp_all = F.log_softmax(logits / params.temperature, dim=-1)
    probs = logp_all.exp()
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = (sorted_p.cumsum(-1) - sorted_p) < params.top_p
        cdf = (sorted_p * keep).cumsum(-1)
        j = torch.searchsorted(cdf, (uniforms * cdf[:, -1]).unsqueeze(-1), right=True)
        tok = order.gather(-1, j.clamp_max(order.shape[1] - 1)).squeeze(-1)
    else:
        cdf = probs.cumsum(-1)
        j = torch.searchsorted(cdf, (uniforms * cdf[:, -1]).unsqueeze(-1), right=True)
        tok = j.clamp_max(probs.shape[1] - 1).squeeze(-1)
    return tok, logp_all.gather(-1, tok[:, None]).squeeze(-1)
