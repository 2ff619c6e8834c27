"""The reflector as the skill loop's stages call it: reflect, merge, rank and consolidate.

What it adds to the chat client is the one rule that protects the skill from a cut reply: a reply
that ended at `max_tokens` (`finish_reason: "length"`) is never parsed. `json_repair` would turn
it into valid-looking JSON whose last edit stops mid-sentence, and that edit could be applied.
Such a reply is asked for once more; if that one is cut too, the call counts as failed (in the
stage's `failed` counter) with a warning naming the key to raise, spelled as the user's config
spells it (`reflector.max_tokens`, or `optimizer.max_tokens` in a config that still uses the old
name). Every other failure (retries spent, an empty reply, a refused request) is the chat
client's `ChatFailure`, which each stage turns into its own fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from honed.models.chat import ChatClient, ChatFailure

log = logging.getLogger(__name__)


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

    def ask(self, prompt: str, stage: str) -> str:
        """The reply to one prompt; a `ChatFailure` when there is no whole reply."""
        try:
            reply = self.client.complete(
                [{"role": "user", "content": prompt}], stage, truncated_retries=1
            )
        except ChatFailure as exc:
            if exc.kind == "truncated":
                key = self.key("reflector.max_tokens")
                log.warning(
                    "the reflector's %s reply was cut at max_tokens (%s) twice and counts as "
                    "failed; raise %s",
                    stage,
                    self.client.config.max_tokens,
                    key,
                )
                raise ChatFailure(
                    f"{exc}; the call counts as failed: raise {key}", exc.kind
                ) from None
            raise
        return reply.text

    def ask_many(self, prompts: Sequence[str], stage: str) -> list[str | ChatFailure]:
        """The replies to many prompts, in order, sent together (up to the client's
        concurrency); a failed call is its `ChatFailure` in its place."""
        if not prompts:
            return []
        workers = min(self.client.config.concurrency, len(prompts))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(self._ask_or_failure, p, stage) for p in prompts]
            return [f.result() for f in futures]

    def _ask_or_failure(self, prompt: str, stage: str) -> str | ChatFailure:
        try:
            return self.ask(prompt, stage)
        except ChatFailure as exc:
            return exc
