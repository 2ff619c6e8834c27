"""A Hugging Face causal LM as a policy: the model, its tokenizer and how prompts become tokens
(chat templates, stop tokens), loading and saving; and `PolicySampler`, the view of it
environments sample through. Sampling itself is `honed.models.generation` (`SamplingParams`
is re-exported here, where it used to live, and so is `left_pad`, now in
`honed.models.batching`); scoring completions is `honed.models.scoring`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
)
from transformers.utils import logging as hf_logging

from honed.config import PolicyConfig
from honed.errors import HonedError
from honed.models.batching import left_pad
from honed.models.device import model_device, resolve_device, resolve_dtype
from honed.models.dropout import eval_mode
from honed.models.generation import SamplingParams, generate
from honed.models.lora import add_adapters, has_adapters, is_adapter_dir, load_adapters
from honed.models.sources import resolve_model
from honed.models.tiny import build_char_tokenizer, build_tiny_model
from honed.types import Prompt, Sample, prompt_text

__all__ = ["Policy", "PolicySampler", "SamplingParams", "left_pad"]

# Checkpoints are written every few steps; per-save progress bars would drown the run's own.
hf_logging.disable_progress_bar()


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
        self._whole_state: dict[str, torch.Tensor] | None = None  # `whole_weights`

    # ------------------------------------------------------------------ construction and I/O

    @property
    def device(self) -> torch.device:
        """Where the model is, and so every batch it is given."""
        return model_device(self.model)

    @property
    def has_adapters(self) -> bool:
        return has_adapters(self.model)

    @classmethod
    def from_config(cls, policy_config: PolicyConfig, seed: int) -> Policy:
        """The policy a run starts from: built or loaded, placed on `policy.device` in
        `policy.dtype`, with gradient checkpointing and fresh LoRA adapters as configured."""
        model, tokenizer = _base_model(policy_config, seed)
        if policy_config.lora is not None:
            model = add_adapters(model, policy_config.lora, seed, policy_config.model)
        return cls(model, tokenizer, chat_template=policy_config.chat_template)

    @classmethod
    def skeleton(cls, policy_config: PolicyConfig, seed: int) -> Policy:
        """The policy `from_config` builds, but its model's structure alone: every parameter
        and buffer on the meta device, no weight read from disk or drawn at random. For a
        learner process that receives its shard of the weights from rank 0
        (`honed.distributed.fsdp.shard`) instead of holding the whole model first."""
        model, tokenizer = _base_model(policy_config, seed, meta=True)
        if policy_config.lora is not None:
            with torch.device("meta"):
                model = add_adapters(model, policy_config.lora, seed, policy_config.model)
        return cls(model, tokenizer, chat_template=policy_config.chat_template)

    @classmethod
    def from_checkpoint(cls, path: str | Path, policy_config: PolicyConfig, seed: int) -> Policy:
        """A checkpoint of a run with this policy config: a whole Hugging Face model, or a LoRA
        adapter on the config's base model (trainable, as it was saved)."""
        path = Path(path)
        if not is_adapter_dir(path):
            return cls.load(
                path,
                policy_config.dtype,
                policy_config.chat_template,
                policy_config.attn_implementation,
                policy_config.device,
                policy_config.gradient_checkpointing,
            )
        model, _ = _base_model(policy_config, seed)
        model = load_adapters(model, path, trainable=True)
        tokenizer = _tokenizer(path)
        _own_storage(model)
        return cls(model, tokenizer, chat_template=policy_config.chat_template)

    @classmethod
    def load(
        cls,
        path: str | Path,
        dtype: str = "float32",
        chat_template: bool = False,
        attn_implementation: str | None = None,
        device: str = "cpu",
        gradient_checkpointing: bool = False,
    ) -> Policy:
        """A Hugging Face model folder as a policy (`dtype` and `device` as in `PolicyConfig`)."""
        path = Path(path)
        if is_adapter_dir(path):
            raise HonedError(
                f"'{path}' holds a LoRA adapter, not a whole model; load it with the run's "
                "config (its policy.model is the base), or merge it with honed export"
            )
        target = resolve_device(device)
        model, tokenizer = _load_folder(path, resolve_dtype(dtype, target), attn_implementation)
        model = model.to(target)
        if gradient_checkpointing:
            enable_checkpointing(model)
        return cls(model, tokenizer, chat_template=chat_template)

    def save(self, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Write a standard Hugging Face directory (config, safetensors weights, tokenizer), or
        with LoRA the adapter in peft's format (`adapter_config.json`,
        `adapter_model.safetensors`) and the tokenizer. `state_dict` gives the weights when the
        model does not hold them whole (a sharded model's, gathered); without it, those given
        to `whole_weights`, if any."""
        if state_dict is None:
            state_dict = self._whole_state
        extra = {} if state_dict is None else {"state_dict": state_dict}
        self.model.save_pretrained(path, safe_serialization=True, **extra)
        self.tokenizer.save_pretrained(path)

    @contextmanager
    def whole_weights(self, state_dict: dict[str, torch.Tensor]) -> Iterator[None]:
        """Within, `save` writes `state_dict` (a sharded model's weights, gathered) unless told
        otherwise. Weight-sync hooks save the policy themselves (a user's `module:Class` hook
        too), knowing nothing of sharding: given the gathered weights here, they write the
        whole model rather than this process's shards."""
        self._whole_state = state_dict
        try:
            yield
        finally:
            self._whole_state = None

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

    def generate(
        self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], params: SamplingParams
    ) -> list[Sample]:
        """Sample one completion per prompt; row i's randomness comes from `seeds[i]` alone
        (`honed.models.generation`)."""
        return generate(self.model, prompts, seeds, params, self.stop_ids, self.pad_id, self.decode)


def _base_model(
    policy_config: PolicyConfig, seed: int, meta: bool = False
) -> tuple[PreTrainedModel, object]:
    """The config's model without adapters, on its device in its dtype (or with `meta` its
    structure alone, on the meta device), and its tokenizer."""
    device = resolve_device(policy_config.device)
    dtype = resolve_dtype(policy_config.dtype, device)
    if policy_config.model == "tiny":
        tokenizer = build_char_tokenizer()
        with torch.device("meta") if meta else nullcontext():
            model = build_tiny_model(
                policy_config.tiny, tokenizer, seed, policy_config.attn_implementation
            )
    else:
        path = resolve_model(policy_config.model, policy_config.gguf_file)
        build = _empty_folder if meta else _load_folder
        model, tokenizer = build(path, dtype, policy_config.attn_implementation)
    model = model.to(device=torch.device("meta") if meta else device, dtype=dtype)
    if policy_config.gradient_checkpointing:
        enable_checkpointing(model)
    return model, tokenizer


def _load_folder(
    path: Path, dtype: torch.dtype, attn_implementation: str | None
) -> tuple[PreTrainedModel, object]:
    if not (path / "config.json").is_file():
        raise HonedError(f"'{path}' is not a Hugging Face model directory (no config.json)")
    kwargs = {"dtype": dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError, ImportError) as exc:
        raise HonedError(f"could not load the model at '{path}': {exc}".splitlines()[0]) from exc
    _own_storage(model)
    return model, _tokenizer(path)


def _empty_folder(
    path: Path, dtype: torch.dtype, attn_implementation: str | None
) -> tuple[PreTrainedModel, object]:
    """The model of a Hugging Face folder built from its config on the meta device (its
    generation settings read as `from_pretrained` reads them), and its tokenizer."""
    kwargs = {"dtype": dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        config = AutoConfig.from_pretrained(path)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, **kwargs)
        if (path / "generation_config.json").is_file():
            model.generation_config = GenerationConfig.from_pretrained(path)
    except (OSError, ValueError, ImportError) as exc:
        raise HonedError(f"could not load the model at '{path}': {exc}".splitlines()[0]) from exc
    return model, _tokenizer(path)


def _tokenizer(path: Path):
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise HonedError(f"could not load the tokenizer at '{path}': {exc}") from exc


def enable_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each layer's activations in the backward pass instead of keeping them
    (`transformers`' checkpointing, non-reentrant; the lean forward honours it too). Called by
    its transformers 5 name where the model has it: the older one warns there and goes in v6."""
    if not model.supports_gradient_checkpointing:
        raise HonedError(
            f"policy.gradient_checkpointing: {type(model).__name__} does not support it"
        )
    settings = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers 5's name
    if enable is not None:
        enable(activation_checkpointing_kwargs=settings)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=settings)


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
        with eval_mode(self.policy.model):
            for start in range(0, len(ids), step):
                out += self.policy.generate(
                    ids[start : start + step], seeds[start : start + step], self.params
                )
        return out
