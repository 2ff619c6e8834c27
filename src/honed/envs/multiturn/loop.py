"""The multi-turn rollout loop: all episodes of a step advance together, a turn at a time.

Each round, every episode still going gets one sampled turn, all in one batched `generate`
call (prompts are the episodes' exact token ids so far), seeded from (episode, turn) so an
episode comes out the same in any batch or process. The environment then answers the episodes
that took a turn (`respond`: tool results, a user reply, or `None` for a final answer), and its
answer is appended through the chat template. An episode ends on a final answer, after
`max_turns` turns, or when the budget of model tokens runs out:

- the budget is the generator's `max_tokens` (the trainer's `max_completion_length`) and counts
  the model's tokens over the whole episode, not the tool results or template tokens; a turn is
  cut where the budget runs out and the episode ends truncated (`Episode.truncated`), scored
  as it stands (usually no answer, so no reward) and left out of the loss when
  `trainer.mask_truncated_completions` is set;
- `turn_tokens` can also cap each turn.

The same loop serves the in-process policy, Ray workers and inference servers: it needs from the
generator only token ids in, samples out, and the policy's tokenizer (`ChatGenerator`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from honed.envs.multiturn.episode import ANSWER, LENGTH, MAX_TURNS, Episode
from honed.envs.multiturn.template import ChatFormat
from honed.errors import HonedError
from honed.types import Message, Sample

Respond = Callable[[list[Episode]], list[list[Message] | None]]


@runtime_checkable
class ChatGenerator(Protocol):
    """A generator backed by a policy: `policy` gives the tokenizer and the end-of-turn token
    (`tokenizer`, `end_of_turn_id`, `chat_template`), `params.max_tokens` the token budget.
    `PolicySampler` (in-process and Ray workers) and `CompletionsGenerator` (inference servers)
    are ones."""

    policy: Any
    params: Any

    def generate(self, prompts: Sequence[list[int]], seeds: Sequence[int]) -> list[Sample]: ...


def chat_format(
    generator: object, where: str, tools: Sequence[dict[str, Any]] = (), tool_format: str = "auto"
) -> ChatFormat:
    """The chat format of the policy behind `generator`, or a clear error saying what is missing."""
    policy = getattr(generator, "policy", None)
    if not isinstance(generator, ChatGenerator) or not hasattr(policy, "tokenizer"):
        raise HonedError(
            f"{where} runs multi-turn episodes and needs a generator backed by a policy (its "
            f"tokenizer and chat template); got {type(generator).__name__}"
        )
    if not getattr(policy, "chat_template", False):
        raise HonedError(
            f"{where} renders conversations with the chat template: set policy.chat_template: true"
        )
    return ChatFormat(policy.tokenizer, policy.end_of_turn_id, tools, tool_format)


def run_episodes(
    episodes: list[Episode],
    generator: ChatGenerator,
    chat: ChatFormat,
    seed_of: Callable[[int, int], int],
    respond: Respond,
    max_turns: int,
    turn_tokens: int | None = None,
) -> None:
    """Advance `episodes` until all have ended (see the module docstring).

    `seed_of(index, turn)` is the seed of episode `index`'s turn `turn`; `respond(episodes)`
    gets the episodes that just took a turn (those that ended on it too: `episode.done`) and
    returns, per episode, the messages the conversation continues with, or `None` for a final
    answer (ignored for episodes that ended).
    """
    budget = int(generator.params.max_tokens)
    for turn in range(max_turns):
        for episode in episodes:
            if not episode.done and episode.model_tokens >= budget:
                episode.stop = LENGTH
        active = [i for i, e in enumerate(episodes) if not e.done]
        if not active:
            return
        samples = generator.generate(
            [episodes[i].context() for i in active], [seed_of(i, turn) for i in active]
        )
        took = [episodes[i] for i in active]
        for episode, sample in zip(took, samples, strict=True):
            limit = budget - episode.model_tokens
            if turn_tokens is not None:
                limit = min(limit, turn_tokens)
            episode.add_model_turn(sample, limit, chat)
        replies = respond(took)
        for episode, reply in zip(took, replies, strict=True):
            if episode.done:
                continue
            if reply is None:
                episode.stop = ANSWER
            elif turn == max_turns - 1:
                episode.stop = MAX_TURNS
            else:
                episode.add_reply(reply, chat)
