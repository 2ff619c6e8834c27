"""The reflector as the skill loop's stages call it: reflect, merge, rank and consolidate.

What it adds to the chat client is the one rule that protects the skill from a cut reply: a reply
that ended at `max_tokens` (`finish_reason: "length"`) is never parsed. `json_repair` would turn
it into valid-looking JSON whose last edit stops mid-sentence, and that edit could be applied.
Such a reply is asked for once more; if that one is cut too, the call counts as failed (in the
stage's `failed` counter) with a warning naming the key to raise, spelled as the user's config
spells it (`reflector.max_tokens`, or `optimizer.max_tokens` in a config that still uses the old
name). Every other failure (retries spent, an empty reply, a refused request) is the chat
client's `ChatFailure`, which each stage turns into its own fallback.

A reflector served with tool calling may answer in `tool_calls` instead of text. Their arguments
are then read as the reply when they hold what the stage asks for (`readers`: edits for
reflect and merge, a ranking, guidance), counted in the stage's `tool_calls`; otherwise the call
fails as `invalid`, with the tools' names in its reason, instead of passing for an empty reply
that proposes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from honed.models.chat import ChatClient, ChatFailure, ChatReply
from honed.skills.edits import edit_list

log = logging.getLogger(__name__)


def _edits(values: list[Any]) -> str | None:
    """Edits (reflect, merge) from tool calls' arguments: every call's edit list and the first
    `summary`, as one reply; None when no call holds either (a call to some other tool)."""
    edits: list[Any] = []
    summary = None
    found = False
    for value in values:
        listed = edit_list(value)
        if listed is not None:
            edits += listed
            found = True
        if summary is None and isinstance(value, dict):
            summary = value.get("summary") or value.get("failure_summary")
            found = found or summary is not None
    if not found:
        return None
    return json.dumps({"summary": summary or "", "edits": edits}, ensure_ascii=False)


def _holding(*keys: str) -> Callable[[list[Any]], str | None]:
    """The first call's arguments that hold one of `keys` (a ranking, guidance)."""

    def read(values: list[Any]) -> str | None:
        for value in values:
            if isinstance(value, dict) and any(k in value for k in keys):
                return json.dumps(value, ensure_ascii=False)
        return None

    return read


# How each stage reads a reply made of tool calls.
READERS: dict[str, Callable[[list[Any]], str | None]] = {
    "reflect": _edits,
    "merge": _edits,
    "rank": _holding("ranking"),
    "consolidate": _holding("guidance"),
}


def _as_written(key: str) -> str:
    return key


class Reflector:
    """A chat client used for the reflector's calls. `max_prompt_tokens` caps a reflection
    prompt's estimated size; `key` spells a setting's key as the user's config does
    (`SkillsConfig.key`), for messages."""

    def __init__(
        self,
        client: ChatClient,
        max_prompt_tokens: int | None = None,
        key: Callable[[str], str] = _as_written,
    ) -> None:
        self.client = client
        self.max_prompt_tokens = max_prompt_tokens
        self.key = key

    def estimate_tokens(self, prompt: str) -> int:
        """The prompt tokens `prompt` will cost, as the client estimates them."""
        return self.client.estimate_tokens([{"role": "user", "content": prompt}])

    def _options(self, stage: str) -> dict[str, Any]:
        return {"truncated_retries": 1, "tool_arguments": READERS.get(stage)}

    def _text(self, result: ChatReply | ChatFailure, stage: str) -> str | ChatFailure:
        """A reply's text, or the failure, worded for a reply cut at max_tokens twice."""
        if isinstance(result, ChatReply):
            return result.text
        if result.kind != "truncated":
            return result
        key = self.key("reflector.max_tokens")
        log.warning(
            "the reflector's %s reply was cut at max_tokens (%s) twice and counts as failed; "
            "raise %s",
            stage,
            self.client.config.max_tokens,
            key,
        )
        return ChatFailure(f"{result}; the call counts as failed: raise {key}", result.kind)

    def ask(self, prompt: str, stage: str) -> str:
        """The reply to one prompt; a `ChatFailure` when there is no whole reply."""
        try:
            reply: ChatReply | ChatFailure = self.client.complete(
                [{"role": "user", "content": prompt}], stage, **self._options(stage)
            )
        except ChatFailure as exc:
            reply = exc
        text = self._text(reply, stage)
        if isinstance(text, ChatFailure):
            raise text
        return text

    def ask_many(self, prompts: Sequence[str], stage: str) -> list[str | ChatFailure]:
        """The replies to many prompts, in order, sent together (up to the client's
        concurrency); a failed call is its `ChatFailure` in its place. A `BudgetStop` is
        raised once the calls in flight are back."""
        out: list[str | ChatFailure] = [ChatFailure("not asked", "gave_up")] * len(prompts)
        batch = [[{"role": "user", "content": p}] for p in prompts]
        for i, result in self.client.complete_many(batch, stage, **self._options(stage)):
            out[i] = self._text(result, stage)
        return out
