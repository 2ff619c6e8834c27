"""Core data types shared by every part of honed.

They are plain dataclasses on purpose: environments, trainers, workers and tests exchange them
without knowing about each other, and they pickle cheaply (Ray ships them between processes).
Token ids are kept exactly as sampled (token-in / token-out), so a multi-turn trajectory is never
re-tokenised for the loss.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Split = Literal["train", "validation", "test"]
SPLITS: tuple[str, ...] = get_args(Split)

# A prompt is plain text, or a conversation in the OpenAI chat format (`[{"role": "system",
# "content": ...}, {"role": "user", ...}]`, few-shot turns included) that a chat template renders.
Message = dict[str, Any]
Prompt = str | list[Message]

CHAT_ROLES = ("system", "user", "assistant", "tool")


def message_problem(prompt: object) -> str | None:
    """Why `prompt` is not a usable prompt (text or chat messages), or `None` if it is."""
    if isinstance(prompt, str):
        return None
    if not isinstance(prompt, list) or not prompt:
        return f"a prompt must be text or a non-empty list of chat messages, got {prompt!r:.80}"
    for i, message in enumerate(prompt):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            return f"message {i} must be an object with a text 'content', got {message!r:.80}"
        if message.get("role") not in CHAT_ROLES:
            return (
                f"message {i} has role {message.get('role')!r}; expected one of "
                f"{', '.join(CHAT_ROLES)}"
            )
    if prompt[-1]["role"] not in ("user", "tool"):
        return "the last message must be the user's (the model answers it)"
    return None


def prompt_text(prompt: Prompt) -> str:
    """One string per prompt: the text itself, or the messages as canonical JSON (hashable,
    stable across runs, and what run files record)."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, ensure_ascii=False, sort_keys=True)


@dataclass
class Item:
    """One task instance.

    `key` is stable across runs and processes (the curriculum tracks items by it, rollout seeds
    derive from it); `level` is an optional difficulty label used for reporting.
    """

    key: str
    env: str
    data: dict[str, Any]
    level: int | None = None


@dataclass
class Score:
    """What a scorer says about one completion.

    `reward` is what the optimiser maximises (it may give partial credit); `success` is exact-task
    success in [0, 1] (the *hard* score: `accuracy` is its mean); `components` are the named
    parts of the reward, logged one by one; `info` goes into the trajectory's `info` (what a
    reward function reported beside its values: timeouts, unreadable verdicts).
    """

    reward: float
    success: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Segment:
    """One model call inside a trajectory.

    `logprobs` are the behaviour policy's log-probabilities of `completion_ids` (π_old when a batch
    is reused). `loss_mask` marks completion tokens that are trained on (tool outputs spliced into
    a completion would be 0); `None` means all ones. `reward` is set only when the environment
    gives credit per call (the memory agent rewards each chunk); otherwise the trajectory's reward
    applies. `truncated` is true when generation hit the length limit before end-of-sequence.
    `advantages`, when set, are the advantages of the completion's tokens as whoever scored it
    fixed them (an Atropos environment that computes its own, or an override that zeroes a
    sequence): the trainer uses them instead of the group-relative advantage.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int] | None = None
    reward: float | None = None
    truncated: bool = False
    advantages: list[float] | None = None

    def mask(self) -> list[int]:
        return self.loss_mask if self.loss_mask is not None else [1] * len(self.completion_ids)


@dataclass
class Sample:
    """One generated completion, token-exact, with the behaviour log-probs of its tokens."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    truncated: bool

    def segment(self, reward: float | None = None) -> Segment:
        return Segment(
            prompt_ids=self.prompt_ids,
            completion_ids=self.completion_ids,
            logprobs=self.logprobs,
            reward=reward,
            truncated=self.truncated,
        )


@dataclass
class Trajectory:
    """The segments of one attempt at an item, with its reward and text for humans."""

    segments: list[Segment]
    reward: float
    success: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    prompt_text: str = ""
    completion_text: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return any(s.truncated for s in self.segments)


@dataclass
class Group:
    """The `num_generations` trajectories of one item: the unit GRPO computes advantages in."""

    env: str
    item_key: str
    trajectories: list[Trajectory]
    level: int | None = None

    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts, stable across processes and Python versions.

    Python's `hash()` is salted per process, so it cannot seed rollouts that must come out the
    same on another worker; BLAKE2 of the parts' text can.
    """
    text = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1
