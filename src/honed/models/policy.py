"""A Hugging Face causal LM as a policy: batched sampling with behaviour log-probs, scoring, I/O.

Sampling is a lean loop over the model's forward with a KV cache rather than `generate`: it must
return the log-probability of every sampled token under the tempered distribution, and it draws
each row's randomness from that row's own seed (inverse-CDF sampling with per-row uniforms), so
a completion does not depend on which other prompts share its batch, or on which worker runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.utils import logging as hf_logging

from honed.config import PolicyConfig
from honed.errors import HonedError
from honed.models.kvcache import InPlaceLayer, sampling_cache
from honed.models.lean import LeanDecoder, lean_forward, supports_lean, supports_lean_decoding
from honed.models.sources import resolve_model
from honed.models.tiny import build_char_tokenizer, build_tiny_model
from honed.types import Prompt, Sample, prompt_text

# Checkpoints are written every few steps; per-save progress bars would drown the run's own.
hf_logging.disable_progress_bar()

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class SamplingParams:
    """`temperature: 0` means greedy decoding (evaluation); log-probs are then at temperature 1."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256


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


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.as_tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids, mask


def make_batch(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    masks: Sequence[Sequence[int]],
    pad_id: int,
) -> TokenBatch:
    """Pack (prompt, completion, loss mask) triples into one padded batch."""
    p_ids, p_mask = left_pad(prompts, pad_id)
    width = max(1, max(len(c) for c in completions))
    c_ids = torch.full((len(completions), width), pad_id, dtype=torch.long)
    c_mask = torch.zeros((len(completions), width), dtype=torch.long)
    c_attn = torch.zeros((len(completions), width), dtype=torch.long)
    for i, (c, m) in enumerate(zip(completions, masks, strict=True)):
        n = len(c)
        if n:
            c_ids[i, :n] = torch.as_tensor(c, dtype=torch.long)
            c_mask[i, :n] = torch.as_tensor(m, dtype=torch.long)
            c_attn[i, :n] = 1
    attention = torch.cat([p_mask, c_attn], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp_min(0)
    return TokenBatch(
        input_ids=torch.cat([p_ids, c_ids], dim=1),
        attention_mask=attention,
        position_ids=positions,
        completion_ids=c_ids,
        completion_mask=c_mask,
    )


class Policy:
    """A causal LM and its tokenizer.

    With `chat_template`, every prompt is rendered by the tokenizer's chat template (text prompts
    as one user turn) and a completion also stops at the template's end-of-turn token, which in
    many families differs from the config's end-of-sequence token (`<|eot_id|>` against
    `<|end_of_text|>` in Llama 3, `<end_of_turn>` against `<eos>` in Gemma).
    """

    def __init__(self, model: PreTrainedModel, tokenizer, chat_template: bool = False) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        eos = tokenizer.eos_token_id
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        stops = {eos} if eos is not None else set()
        if isinstance(gen_eos, list):
            stops |= set(gen_eos)
        elif gen_eos is not None:  # token id 0 is a valid stop
            stops.add(gen_eos)
        self.end_of_turn_id: int | None = None
        if chat_template:
            if not getattr(tokenizer, "chat_template", None):
                raise HonedError(
                    "policy.chat_template is true but the tokenizer has no chat template; "
                    "set policy.chat_template: false or use an instruct model"
                )
            self.end_of_turn_id = end_of_turn_id(tokenizer)
            if self.end_of_turn_id is not None:
                stops.add(self.end_of_turn_id)
        if not stops:
            raise HonedError(
                "the tokenizer has no end-of-sequence token; generation could not stop"
            )
        self.stop_ids = sorted(stops)
        self.eos_id = eos if eos is not None else self.stop_ids[0]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id

    # ------------------------------------------------------------------ construction and I/O

    @classmethod
    def from_config(cls, cfg: PolicyConfig, seed: int) -> Policy:
        if cfg.model == "tiny":
            tokenizer = build_char_tokenizer()
            model = build_tiny_model(cfg.tiny, tokenizer, seed).to(DTYPES[cfg.dtype])
            return cls(model, tokenizer, chat_template=cfg.chat_template)
        return cls.load(
            resolve_model(cfg.model, cfg.gguf_file),
            dtype=cfg.dtype,
            chat_template=cfg.chat_template,
            attn_implementation=cfg.attn_implementation,
        )

    @classmethod
    def load(
        cls,
        path: str | Path,
        dtype: str = "float32",
        chat_template: bool = False,
        attn_implementation: str | None = None,
    ) -> Policy:
        path = Path(path)
        if not (path / "config.json").is_file():
            raise HonedError(f"'{path}' is not a Hugging Face model directory (no config.json)")
        kwargs = {"dtype": DTYPES[dtype]}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        try:
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as exc:
            raise HonedError(f"could not load the model at '{path}': {exc}") from exc
        _own_storage(model)
        return cls(model, tokenizer, chat_template=chat_template)

    def save(self, path: str | Path) -> None:
        """Write a standard Hugging Face directory (config, safetensors weights, tokenizer)."""
        self.model.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)

    # ------------------------------------------------------------------ text

    def encode(self, prompt: Prompt) -> list[int]:
        """The prompt's tokens: exactly what the chat template gives with the generation prompt
        added, or the text tokenised as it is."""
        if isinstance(prompt, list) and not self.chat_template:
            raise HonedError(
                "a prompt given as chat messages needs policy.chat_template: true "
                f"(prompt: {prompt_text(prompt):.80})"
            )
        if not self.chat_template:
            return list(self.tokenizer(prompt)["input_ids"])
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        # transformers 5 may still hand back a BatchEncoding (a Mapping, not a dict)
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    @property
    def end_id(self) -> int:
        """The token a finished completion ends with: the end of the turn under a chat template,
        end-of-sequence otherwise."""
        return self.end_of_turn_id if self.end_of_turn_id is not None else self.eos_id

    def encode_target(self, text: str) -> list[int]:
        """A completion as the policy would emit it: the text's tokens, then its end token."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return [*ids, self.end_id]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # ------------------------------------------------------------------ sampling

    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], params: SamplingParams
    ) -> list[Sample]:
        """Sample one completion per prompt; row i's randomness comes from `seeds[i]` alone.

        Identical prompts (a GRPO group) are prefilled once and their KV cache shared; rows that
        have stopped leave the batch, so long stragglers do not drag finished rows along.
        """
        if len(prompts) != len(seeds):
            raise ValueError("generate needs exactly one seed per prompt")
        if not prompts:
            return []
        batch = len(prompts)
        steps = params.max_tokens
        uniforms = None
        if params.temperature != 0:
            uniforms = torch.stack(
                [torch.rand(steps, generator=torch.Generator().manual_seed(int(s))) for s in seeds]
            )
        distinct: dict[tuple[int, ...], int] = {}
        row_prompt = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        input_ids, attention = left_pad(list(distinct), self.pad_id)
        positions = (attention.cumsum(-1) - 1).clamp_min(0)
        cache = sampling_cache(self.model.config, input_ids.shape[1] + steps)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        logits = out.logits[:, -1, :].float()
        next_pos = positions[:, -1] + 1
        lean = None
        if supports_lean_decoding(self.model) and all(
            type(layer) is InPlaceLayer for layer in cache.layers
        ):
            lean = LeanDecoder(self.model, int(next_pos.max()) + steps)
        if len(distinct) < batch:
            index = torch.as_tensor(row_prompt, dtype=torch.long)
            cache.reorder_cache(index)
            logits, attention, next_pos = logits[index], attention[index], next_pos[index]
        # Every position a row can reach, so that each step takes a view instead of a copy.
        width = attention.shape[1]
        attention = torch.cat([attention, attention.new_ones((batch, steps))], dim=1)
        bias = None  # the lean step's additive padding mask, rebuilt when rows leave
        active = torch.arange(batch)  # the original row of each row still in the batch
        done = torch.zeros(batch, dtype=torch.bool)  # rows in the batch that have stopped
        stop_ids = torch.as_tensor(self.stop_ids, dtype=torch.long)
        # Tokens and log-probs are kept per run of steps over the same rows and written out at
        # the end: scattering each step's into [batch, steps] costs as much as sampling it.
        runs: list[tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]] = [(active, [], [])]
        for t in range(steps):
            tok, lp = _pick(logits, None if uniforms is None else uniforms[:, t], params)
            runs[-1][1].append(tok)
            runs[-1][2].append(lp)
            done |= torch.isin(tok, stop_ids)
            finished = int(done.sum())
            if t == steps - 1 or finished == len(done):
                break
            # Dropping rows copies the cache, so stopped rows ride along until they are an
            # eighth of the batch: a few wasted rows cost less than a copy at every stop.
            if finished * 8 >= len(done):
                keep = (~done).nonzero().squeeze(1)
                cache.reorder_cache(keep)
                active, tok, attention, next_pos = (
                    active[keep],
                    tok[keep],
                    attention[keep],
                    next_pos[keep],
                )
                uniforms = None if uniforms is None else uniforms[keep]
                done, bias = done[keep], None
                runs.append((active, [], []))
            width += 1
            if lean is not None:
                if bias is None:
                    bias = lean.padding_bias(attention)
                logits = lean.step(tok, next_pos, bias[..., :width], cache.layers).float()
            else:
                out = self.model(
                    input_ids=tok[:, None],
                    attention_mask=attention[:, :width],
                    position_ids=next_pos[:, None],
                    past_key_values=cache,
                    use_cache=True,
                )
                logits = out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        tokens = torch.full((batch, steps), self.pad_id, dtype=torch.long)
        logprobs = torch.zeros((batch, steps), dtype=torch.float32)
        first = 0
        for rows, run_tokens, run_logprobs in runs:
            last = first + len(run_tokens)
            tokens[rows, first:last] = torch.stack(run_tokens, dim=1)
            logprobs[rows, first:last] = torch.stack(run_logprobs, dim=1)
            first = last
        # A completion ends at its first stop token (a stopped row still in the batch went on
        # sampling; what it wrote after the stop is cut off), or at `steps` tokens.
        stops = torch.isin(tokens, stop_ids)
        lengths = torch.where(stops.any(1), stops.int().argmax(1) + 1, steps)
        samples = []
        for i in range(batch):
            n = int(lengths[i])
            ids = tokens[i, :n].tolist()
            ended = bool(n > 0 and ids[-1] in self.stop_ids)
            samples.append(
                Sample(
                    prompt_ids=list(prompts[i]),
                    completion_ids=ids,
                    logprobs=logprobs[i, :n].tolist(),
                    text=self.decode(ids[:-1] if ended else ids),
                    truncated=not ended,
                )
            )
        return samples

    # ------------------------------------------------------------------ scoring

    def completion_logprobs(
        self, batch: TokenBatch, temperature: float = 1.0, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return completion_logprobs(self.model, batch, temperature, with_entropy)


def end_of_turn_id(tokenizer) -> int | None:
    """The special token the chat template closes an assistant turn with, if it has one.

    Found by rendering a short conversation and taking the first special token after the
    assistant's text, so it works for any template without a table of model families.
    """
    marker = "honed-end-of-turn-probe"
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": marker}],
            tokenize=False,
        )
    except Exception:  # a template that rejects this conversation: fall back to eos alone
        return None
    if not isinstance(text, str) or marker not in text:
        return None
    tail = text[text.rindex(marker) + len(marker) :]
    special = set(tokenizer.all_special_ids)
    special |= {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    for token in tokenizer(tail, add_special_tokens=False)["input_ids"]:
        if token in special:
            return int(token)
    return None


def _own_storage(model: torch.nn.Module) -> None:
    """Copy every parameter and buffer into memory of its own, allocated by torch.

    Weights read from safetensors sit inside the file's buffer at offsets that are not aligned
    as torch's allocator aligns new tensors, and CPU kernels choose their vectorised paths by
    alignment: the same matmul on a loaded and on a freshly built parameter can round
    differently. After this copy a loaded model computes exactly what the model that was saved
    computed, which is what makes `--resume` bit-identical to an uninterrupted run. Tied
    weights stay tied: a shared parameter object is copied once.
    """
    with torch.no_grad():
        for param in model.parameters():
            param.data = param.data.clone(memory_format=torch.contiguous_format)
        for module in model.modules():
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    module._buffers[name] = buffer.clone(memory_format=torch.contiguous_format)


def completion_logprobs(
    model: PreTrainedModel, batch: TokenBatch, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, C] of the completion tokens (with grad), and optionally their entropy.

    Logits are divided by the sampling temperature, as during sampling, so that on-policy the
    scores equal the behaviour log-probs.
    """
    width = batch.completion_width
    if supports_lean(model):
        logits, _ = lean_forward(
            model, batch.input_ids, batch.position_ids, batch.attention_mask, keep=width + 1
        )
    else:
        logits = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
            logits_to_keep=width + 1,
        ).logits
    return token_logprobs(logits[:, :-1, :], batch.completion_ids, temperature, with_entropy)


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


def _pick(
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


class PolicySampler:
    """A `Generator` view of a policy with fixed sampling settings (what environments see)."""

    def __init__(self, policy: Policy, params: SamplingParams, batch_size: int | None = None):
        self.policy = policy
        self.params = params
        self.batch_size = batch_size

    def encode(self, prompt: Prompt) -> list[int]:
        return self.policy.encode(prompt)

    def generate(self, prompts: Sequence[Prompt | list[int]], seeds: Sequence[int]) -> list[Sample]:
        """Samples in eval mode (no dropout), whatever mode training left the model in, so that
        the learner and a rollout worker with the same weights sample the same tokens."""
        # A GRPO group repeats its prompt num_generations times: encode each prompt once.
        encoded: dict[str, list[int]] = {}
        ids = []
        for p in prompts:
            if isinstance(p, str) or (p and isinstance(p[0], dict)):
                key = prompt_text(p)
                if key not in encoded:
                    encoded[key] = self.policy.encode(p)
                p = encoded[key]
            ids.append(list(p))
        step = self.batch_size or max(1, len(ids))
        out: list[Sample] = []
        model = self.policy.model
        training = model.training
        model.eval()
        try:
            for start in range(0, len(ids), step):
                out += self.policy.generate(
                    ids[start : start + step], seeds[start : start + step], self.params
                )
        finally:
            model.train(training)
        return out
