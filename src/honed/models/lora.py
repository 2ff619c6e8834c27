"""LoRA adapters through peft: adding them, the reference without them, saving and merging.

With `policy.lora`, the policy is a `peft` model: only the adapters' parameters train (peft
freezes the base), and the reference policy of the KL terms is the very same model with its
adapters switched off (`AdapterFreeReference`), so no second copy of the weights is held. A
checkpoint holds the adapter in peft's own format (`adapter_config.json`,
`adapter_model.safetensors`) and the tokenizer: `PeftModel.from_pretrained(base, checkpoint)`
loads it; `merged` folds the adapters into the base weights for `honed export`.

On a bfloat16 or float16 base, peft keeps the adapter weights in float32 (its
`autocast_adapter_dtype`), so their updates and their AdamW moments do not round in half
precision; the base stays in the policy's dtype.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import PreTrainedModel

from honed.config import LoraSettings
from honed.errors import HonedError
from honed.models.sources import is_adapter_dir, is_checkpoint

__all__ = ["AdapterFreeReference", "add_adapters", "is_adapter_dir", "is_checkpoint", "merged"]


def require_peft() -> None:
    if importlib.util.find_spec("peft") is None:
        raise HonedError(
            "policy.lora needs the peft package: pip install peft (or: pip install 'honed[lora]')"
        )


def has_adapters(model: torch.nn.Module) -> bool:
    """Whether `model` is a peft model."""
    return callable(getattr(model, "disable_adapter", None)) and hasattr(model, "peft_config")


def add_adapters(
    model: PreTrainedModel, settings: LoraSettings, seed: int, base_name: str
) -> torch.nn.Module:
    """`model` with fresh LoRA adapters (B = 0, so the policy starts as the base model).

    A's random initialisation is drawn from `seed` alone (the global RNG is left as it was),
    so the same config gives the same adapters on any run and device. `base_name` is recorded
    as the adapter's `base_model_name_or_path`, where `PeftModel.from_pretrained` users look.
    """
    require_peft()
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_name,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            peft_model = get_peft_model(model, config)
        except ValueError as exc:  # e.g. target modules that the model does not have
            raise HonedError(f"policy.lora: {exc}".splitlines()[0]) from exc
    return peft_model


def load_adapters(model: PreTrainedModel, path: Path, trainable: bool) -> torch.nn.Module:
    """`model` with the adapter saved in `path` (peft's format), trainable or frozen."""
    require_peft()
    from peft import PeftModel

    try:
        return PeftModel.from_pretrained(model, str(path), is_trainable=trainable)
    except (OSError, ValueError, KeyError) as exc:
        raise HonedError(f"could not load the LoRA adapter in {path}: {exc}") from exc


def merged(model: torch.nn.Module) -> PreTrainedModel:
    """The base model with the adapters folded into its weights (W + B·A·alpha/r): a plain
    `transformers` model. Modifies `model`'s base in place."""
    return model.merge_and_unload()


class AdapterFreeReference:
    """The reference policy of a LoRA run: the policy's own model with its adapters off.

    `scope()` yields the model to score with; outside it the adapters are on again. The base
    weights never train, so this is exactly the model the run started from (before any
    warm-start's adapter: with LoRA, the reference is the base model).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    @contextlib.contextmanager
    def scope(self) -> Iterator[torch.nn.Module]:
        with self.model.disable_adapter():
            yield self.model
