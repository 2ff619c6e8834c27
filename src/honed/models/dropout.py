"""Finding and switching off a model's dropout: for a whole run (`disable_dropout`), or for a
block of code (`eval_mode`).

Dropout lives in two places in Hugging Face models: `nn.Dropout` modules (GPT-2's residual and
embedding dropout) and plain float attributes that a module passes to a functional call
(Llama's `attention_dropout`, given to scaled-dot-product attention only in training mode).
The config holds the rates too (`attention_dropout`, `resid_pdrop`, ...).
Both are covered here, so that "is any dropout active" and "turn it off" mean the same thing
whatever the architecture.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def _is_rate(name: str, value: object) -> bool:
    """A float attribute that holds a dropout probability (`attention_dropout`, `resid_pdrop`)."""
    return isinstance(value, float) and ("dropout" in name or name.endswith("pdrop"))


def _rates(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str | None, float]]:
    """Every dropout rate of the model: (module, attribute or None for nn.Dropout, rate)."""
    found: list[tuple[torch.nn.Module, str | None, float]] = []
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            found.append((module, None, float(module.p)))
            continue
        for name, value in vars(module).items():
            if _is_rate(name, value):
                found.append((module, name, value))
    return found


def dropout_active(model: torch.nn.Module) -> bool:
    """Whether the model, in training mode, would drop anything."""
    return any(rate > 0 for _, _, rate in _rates(model))


def disable_dropout(model: torch.nn.Module) -> None:
    """Set every dropout rate of the model to 0 (TRL's `disable_dropout`), in place."""
    for module, name, _ in _rates(model):
        if name is None:
            module.p = 0.0
        else:
            setattr(module, name, 0.0)
    # and in the config, so that a saved checkpoint keeps the setting
    config = getattr(model, "config", None)
    for key, value in list(vars(config).items()) if config is not None else []:
        if _is_rate(key, value):
            setattr(config, key, 0.0)


@contextmanager
def eval_mode(*models: torch.nn.Module) -> Iterator[None]:
    """Every model in eval mode (no dropout) inside the block, and back in the mode it was in
    after it, however the block ends: sampling, evaluation and the scoring of π_old and the
    reference must not drop anything, whatever mode training left the model in."""
    modes = [model.training for model in models]
    for model in models:
        model.eval()
    try:
        yield
    finally:
        for model, training in zip(models, modes, strict=True):
            model.train(training)
