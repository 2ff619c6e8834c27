"""Small verifiers environments for the `verifiers` environment's tests, written as a user would:
a module with `load_environment(**env_args)` (`env: verifiers_world` in a config).

- `single`: a `vf.SingleTurnEnv` with a system prompt, few-shot turns, an eval dataset, `info`,
  and a rubric of a sync function, an async one, a group-level one (`completions`, plural) and
  a metric of weight 0; `task` has rows with a `task` payload, `text` completion-style prompts;
- `tools`: a `vf.ToolEnv` over a price table (`lookup`, and an async `double`);
- `guess`: a custom `vf.MultiTurnEnv`, a number-guessing game whose `env_response` answers
  "higher" or "lower", keeps the guesses in the state, and ends the game with a
  `final_env_response`; its rubric reads the state;
- and environments honed must refuse, each for one reason (`kind=...`).
"""

from __future__ import annotations

import re

import verifiers as vf
from datasets import Dataset

PRICES = {"ab": 12, "cd": 30, "ef": 7, "gh": 5}
SECRETS = {"one": 3, "two": 6, "three": 8}
FEW_SHOT = [
    {"role": "user", "content": "What is 1 + 1?"},
    {"role": "assistant", "content": "2"},
]


LOOKUPS: list[str] = []


def lookup(name: str) -> int:
    """The price of a product.

    Args:
        name: the product's name
    """
    LOOKUPS.append(name)
    return PRICES[name]


async def double(value: int) -> int:
    """Twice a number.

    Args:
        value: the number
    """
    return 2 * value


def _text(completion) -> str:
    return str(completion[-1]["content"] or "").strip()


def correct(completion, answer, **kwargs) -> float:
    return float(_text(completion) == answer)


async def brief(completion, info, **kwargs) -> float:
    return float(len(_text(completion)) <= info["limit"])


def shortest_in_group(completions, **kwargs) -> list[float]:
    """Group-level: 1 for the shortest answers of the group."""
    lengths = [len(_text(c)) for c in completions]
    return [float(n == min(lengths)) for n in lengths]


def kind_is_sum(task, **kwargs) -> float:
    return float(task.get("kind") == "sum")


def answer_length(completion, **kwargs) -> float:
    return float(len(_text(completion)))


def _sums(numbers: range) -> list[dict]:
    return [
        {"question": f"What is {n} + {n + 1}?", "answer": str(2 * n + 1), "info": {"limit": 4}}
        for n in numbers
    ]


def _tasks() -> list[dict]:
    """Rows whose `task` is the payload verifiers builds the state from (0.3's meaning)."""
    rows = []
    for n in range(1, 5):
        prompt = [{"role": "user", "content": f"What is {n} + {n}?"}]
        task = {"prompt": prompt, "answer": str(2 * n), "kind": "sum" if n % 2 else "other"}
        rows.append({"prompt": prompt, "answer": str(2 * n), "task": task})
    return rows


def _prices(names: list[str]) -> list[dict]:
    return [{"question": f"price of {n}?", "answer": str(PRICES[n])} for n in names]


class GuessEnv(vf.MultiTurnEnv):
    """Guess the secret number: each wrong guess is answered "higher" or "lower"; a right one
    ends the game with "Correct!" (a `final_env_response`)."""

    async def setup_state(self, state: vf.State) -> vf.State:
        state["guesses"] = []
        return state

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        found = re.findall(r"\d+", str(messages[-1]["content"] or ""))
        guess = int(found[-1]) if found else None
        state["guesses"].append(guess)
        secret = int(state["answer"])
        if guess == secret:
            reply = [vf.UserMessage(content="Correct!")]
            state["final_env_response"] = reply
            return reply
        hint = "a number, please" if guess is None else "higher" if guess < secret else "lower"
        return [vf.UserMessage(content=hint)]


def solved(state, **kwargs) -> float:
    return float(bool(state["guesses"]) and state["guesses"][-1] == int(state["answer"]))


def guesses(state, **kwargs) -> float:
    return float(len(state["guesses"]))


class RewritesPrompts(vf.SingleTurnEnv):
    async def get_prompt_messages(self, state):
        return state["prompt"]


class OwnRollout(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return []

    async def rollout(self, input, client, model, sampling_args=None):
        raise AssertionError("honed never calls this")


class AsksItsClient(vf.SingleTurnEnv):
    async def get_model_response(self, state, prompt, **kwargs):
        raise AssertionError("honed never calls this")


class NotMultiTurn(vf.Environment):
    async def rollout(self, input, client, model, sampling_args=None):
        raise AssertionError("honed never calls this")


class RaisesInEnvResponse(GuessEnv):
    async def env_response(self, messages, state, **kwargs):
        raise KeyError("no such secret")


class VfErrorInEnvResponse(GuessEnv):
    async def env_response(self, messages, state, **kwargs):
        raise vf.ToolCallError("the game server is down")


def load_environment(kind: str = "single", max_turns: int | None = None, **kwargs):
    """The environment `kind` names (see the module docstring)."""
    if kind == "single":
        rubric = vf.Rubric(
            funcs=[correct, brief, shortest_in_group, answer_length],
            weights=[1.0, 0.25, 0.5, 0.0],
        )
        return vf.SingleTurnEnv(
            dataset=Dataset.from_list(_sums(range(1, 9))),
            eval_dataset=Dataset.from_list(_sums(range(20, 23))),
            system_prompt="Answer with the number only.",
            few_shot=FEW_SHOT,
            rubric=rubric,
            **kwargs,
        )
    if kind == "task":
        return vf.SingleTurnEnv(
            dataset=Dataset.from_list(_tasks()),
            rubric=vf.Rubric(funcs=[correct, kind_is_sum], weights=[1.0, 0.5]),
            **kwargs,
        )
    if kind == "text":
        rows = [{"prompt": f"{n} + {n} =", "answer": str(2 * n)} for n in range(1, 6)]
        return vf.SingleTurnEnv(
            dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[correct]), **kwargs
        )
    if kind == "tools":
        rubric = vf.Rubric(funcs=[correct, shortest_in_group], weights=[1.0, 0.5])
        return vf.ToolEnv(
            dataset=Dataset.from_list(_prices(["ab", "cd", "ef", "gh"])),
            eval_dataset=Dataset.from_list(_prices(["ab", "ef"])),
            tools=[lookup, double],
            rubric=rubric,
            max_turns=3 if max_turns is None else max_turns,
            system_prompt="Use the tools, then answer with the number only.",
            **kwargs,
        )
    games = [
        {"question": f"Guess my number ({name}), from 1 to 9.", "answer": str(secret)}
        for name, secret in SECRETS.items()
    ]
    cls = {
        "guess": GuessEnv,
        "raises": RaisesInEnvResponse,
        "vf_error": VfErrorInEnvResponse,
        "own_rollout": OwnRollout,
    }.get(kind)
    if cls is not None:
        return cls(
            dataset=Dataset.from_list(games),
            rubric=vf.Rubric(funcs=[solved, guesses], weights=[1.0, 0.0]),
            max_turns=-1 if max_turns is None else max_turns,
            **kwargs,
        )
    simple = {"dataset": Dataset.from_list(_prices(["ab"]))}
    if kind == "rewrites_prompts":
        return RewritesPrompts(**simple)
    if kind == "asks_its_client":
        return AsksItsClient(**simple)
    if kind == "not_multi_turn":
        return NotMultiTurn(**simple)
    if kind == "not_an_env":
        return {"dataset": "no"}
    raise ValueError(f"no such kind: {kind}")
