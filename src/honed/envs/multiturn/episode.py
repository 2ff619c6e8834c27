"""One multi-turn rollout as exact tokens: the model's sampled ids interleaved with the
template's ids for what the environment answered.

`ids` is everything after the prompt, in order; `mask` is 1 on the model's own tokens (the only
ones trained on) and 0 on the environment's; `logprobs` holds the behaviour log-probs of the
model's tokens (0 elsewhere, never read). The whole episode is one `Segment`, so the GRPO
advantage of the trajectory covers every model token of every turn, and the loss is computed in
one forward pass over the conversation.

Beside the tokens, an episode keeps the conversation twice: `history` is what the chat template
renders to find the next bridge (each model turn as the text it wrote), `messages` is the
OpenAI-format view reward functions read (assistant turns with structured `tool_calls`, then
`tool` messages).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from honed.envs.multiturn.template import ChatFormat
from honed.envs.multiturn.toolcalls import ToolCall
from honed.types import Message, Sample, Segment

# Why an episode ended.
ANSWER = "answer"  # a turn without a tool call: the final answer
MAX_TURNS = "max_turns"  # the last allowed turn still called tools
LENGTH = "length"  # the episode's (or the turn's) token budget ran out mid-turn: truncated
END = "end"  # the model ended the sequence itself (a stop token that is not the end of turn)


@dataclass
class Turn:
    """One model turn: what it wrote, and what came of it."""

    text: str
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)  # name, content, error
    format_errors: list[str] = field(default_factory=list)
    repaired: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "content": self.content,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in self.calls],
            "tool_results": list(self.results),
            "format_errors": list(self.format_errors),
        }


@dataclass
class Episode:
    """A rollout in progress (and, once `stop` is set, finished)."""

    prompt: list[Message]
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    model_tokens: int = 0
    stop: str | None = None

    @property
    def done(self) -> bool:
        return self.stop is not None

    @property
    def truncated(self) -> bool:
        return self.stop == LENGTH

    def context(self) -> list[int]:
        """The ids the model continues from: the prompt and everything since."""
        return [*self.prompt_ids, *self.ids]

    def add_model_turn(self, sample: Sample, limit: int, chat: ChatFormat) -> Turn:
        """Append the model's sampled turn, cut to at most `limit` tokens (the budget left).

        A turn cut short, or one the model did not end with the end-of-turn token, ends the
        episode (`LENGTH` and `END`); the caller decides what a complete turn leads to.
        """
        ids, logprobs = list(sample.completion_ids), list(sample.logprobs)
        cut = len(ids) > limit
        if cut:
            ids, logprobs = ids[:limit], logprobs[:limit]
        ended = bool(ids) and ids[-1] == chat.end_of_turn_id
        text = sample.text if not cut else chat.decode(ids[:-1] if ended else ids)
        self.ids += ids
        self.logprobs += logprobs
        self.mask += [1] * len(ids)
        self.model_tokens += len(ids)
        self.history.append({"role": "assistant", "content": text})
        turn = Turn(text)
        self.turns.append(turn)
        if not ended:
            self.stop = LENGTH if cut or sample.truncated else END
        return turn

    def add_reply(self, messages: list[Message], chat: ChatFormat) -> None:
        """Append the environment's messages, tokenised by the template (masked)."""
        bridge = chat.bridge_ids([*self.prompt, *self.history], messages)
        self.ids += bridge
        self.logprobs += [0.0] * len(bridge)
        self.mask += [0] * len(bridge)
        self.history += messages

    def segment(self) -> Segment:
        return Segment(
            prompt_ids=self.prompt_ids,
            completion_ids=list(self.ids),
            logprobs=list(self.logprobs),
            loss_mask=list(self.mask),
            truncated=self.truncated,
        )

    def trajectory(self) -> dict[str, Any]:
        """The episode for reward functions and run files: turns, calls, results, why it ended."""
        return {
            "turns": [t.to_dict() for t in self.turns],
            "stop": self.stop,
            "truncated": self.truncated,
            "model_tokens": self.model_tokens,
        }
