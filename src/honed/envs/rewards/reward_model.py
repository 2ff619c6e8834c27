"""`reward_model`: a sequence-classification checkpoint scores completions.

    reward:
      - type: reward_model
        path: runs/rm/checkpoint        # a local folder, or a Hub id already in the HF cache
        batch_size: 16
        device: cuda                    # where the policy is; cpu by default

Each (prompt, completion) is rendered with the reward model's own chat template when it has
one (a text prompt as a user turn, a text completion as the assistant's; for multi-turn
environments the whole conversation), else as the prompt text followed by the completion
text. Texts longer than `max_length` tokens keep their end (the completion). The reward is the
model's logit when it has one label (TRL's reward models), or the probability of `label` when
it has several. Batches are padded and scored under `torch.inference_mode`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from huggingface_hub import try_to_load_from_cache
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from honed.errors import HonedError, positive_int
from honed.models.device import DTYPES


def _folder(path: str) -> str | None:
    """A local folder, or the cached snapshot folder of a Hub id (no network: loading from the
    folder keeps transformers from asking the Hub about it)."""
    if Path(path).is_dir():
        return path
    try:
        cached = try_to_load_from_cache(path, "config.json")
    except ValueError:  # not a valid repository id
        return None
    return str(Path(cached).parent) if isinstance(cached, str) else None


class RewardModel:
    """Scores completions with a classifier (see the module docstring)."""

    def __init__(
        self,
        where: str = "reward_model",
        *,
        path: str,
        batch_size: int = 8,
        device: str = "cpu",
        dtype: str = "float32",
        max_length: int = 2048,
        label: int | None = None,
    ) -> None:
        if dtype not in DTYPES:
            raise HonedError(f"{where}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        positive_int(where, "batch_size", batch_size)
        folder = _folder(path)
        if folder is None:
            raise HonedError(
                f"{where}: cannot load the reward model '{path}': it is neither a folder nor a "
                "Hub id already in the Hugging Face cache"
            )
        try:
            self.model = AutoModelForSequenceClassification.from_pretrained(
                folder, dtype=DTYPES[dtype]
            )
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
        except (OSError, ValueError) as exc:
            raise HonedError(
                f"{where}: cannot load the reward model '{path}' (a local folder, or a Hub id "
                f"already in the Hugging Face cache): {exc}".splitlines()[0]
            ) from exc
        try:
            self.device = torch.device(device)
        except RuntimeError as exc:
            raise HonedError(f"{where}: invalid device {device!r}: {exc}") from exc
        self.model.to(self.device).eval()
        labels = self.model.config.num_labels
        if labels != 1 and (label is None or not 0 <= label < labels):
            raise HonedError(
                f"{where}: the model has {labels} labels; set 'label' to the index of the one "
                "whose probability is the reward"
            )
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.tokenizer.truncation_side = "left"
        self.chat = bool(getattr(self.tokenizer, "chat_template", None))
        self.label = label
        self.batch_size = batch_size
        self.max_length = max_length

    def text(self, prompt: Any, completion: Any) -> str:
        """One (prompt, completion) as the reward model reads it."""
        if self.chat:
            asked = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            said = (
                [{"role": "assistant", "content": completion}]
                if isinstance(completion, str)
                else completion
            )
            return str(self.tokenizer.apply_chat_template([*asked, *said], tokenize=False))
        if not isinstance(prompt, str) or not isinstance(completion, str):
            raise HonedError(
                "the reward model has no chat template, so it cannot read chat messages; use a "
                "model with one, or text prompts"
            )
        return prompt + completion

    @torch.inference_mode()
    def __call__(self, prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
        texts = [self.text(p, c) for p, c in zip(prompts, completions, strict=True)]
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                add_special_tokens=not self.chat,  # a chat template writes its own
                return_tensors="pt",
            ).to(self.device)
            logits = self.model(**batch).logits.float()
            if self.label is None:
                scores += logits[:, 0].tolist()
            else:
                scores += logits.softmax(-1)[:, self.label].tolist()
        return scores
