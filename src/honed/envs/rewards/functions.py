"""Reward functions as users write them: one or several, weighted, TRL's signature, async.

An environment's `reward` is one entry or a list of them, each

- `module:function` or `path/to/file.py:function`: a function with TRL's signature, called with
  `prompts`, `completions`, `completion_ids` and every column of the data as keyword arguments
  (lists aligned with the completions; multi-turn environments also pass `messages` and
  `trajectory`); a function without `**kwargs` gets only the arguments it names;
- `{function: module:function, name: other}`: the same under another component name;
- `{type: llm_judge, ...}` or `{type: reward_model, ...}`: a built-in (`judge.py`,
  `reward_model.py`), with its settings.

`reward_weights` (default all 1.0) weigh the components; the reward is their weighted sum and
each component is logged by its name (`reward/<env>/<name>`). Synchronous functions get the
whole batch in one call. `async def` functions are called once per completion (lists of one,
still TRL's signature), all of them concurrently on the background loop, each limited to
`reward_timeout` seconds; a completion whose call runs out of time scores 0 for that function,
is counted (`reward/<env>/<name>/timeouts`) and logged. A function that raises, or returns
anything but one finite number per completion (None, NaN, a wrong length), stops the run with
one message naming the function and the item.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from honed.envs.aio import Outcome, run_all
from honed.errors import HonedError
from honed.reach import ImportSpec
from honed.types import Item
from honed.user_code import load_object

log = logging.getLogger(__name__)

# Built-in rewards by `type`, imported only when used.
BUILTINS = {
    "llm_judge": "honed.envs.rewards.judge:LLMJudge",
    "reward_model": "honed.envs.rewards.reward_model:RewardModel",
}


@dataclass
class RewardFunction:
    """One component: its name, the callable, what it accepts (None: everything), its spec."""

    name: str
    fn: Callable[..., Any]
    spec: Any
    accepts: set[str] | None
    is_async: bool


@dataclass
class Rewarded:
    """The rewards of a batch: the weighted sums, each component's values, and per completion
    the components that timed out or reported an error (counted, not silent)."""

    rewards: list[float]
    components: list[dict[str, float]]
    problems: list[dict[str, str]] = field(default_factory=list)


class RewardSet:
    """An environment's reward functions and weights (see the module docstring).

    `where` names the environment in messages; `passed` are the keyword arguments the
    environment passes (its columns and honed's own), checked against what each user function
    requires at construction, before any training.
    """

    def __init__(
        self,
        where: str,
        reward: Any,
        reward_weights: Any = None,
        reward_timeout: float | None = 60.0,
        passed: Sequence[str] = (),
        columns: Sequence[str] = (),
    ) -> None:
        self.where = where
        self.specs = list(reward) if isinstance(reward, list | tuple) else [reward]
        if not self.specs:
            raise HonedError(f"{where}: 'reward' needs at least one function")
        self.weights = self._weights(reward_weights)
        if reward_timeout is not None and (
            isinstance(reward_timeout, bool)
            or not isinstance(reward_timeout, numbers.Real)
            or not reward_timeout > 0
        ):
            raise HonedError(
                f"{where}: reward_timeout must be a positive number of seconds or null, "
                f"got {reward_timeout!r}"
            )
        self.timeout = reward_timeout
        self.passed = tuple(passed)
        self.columns = tuple(columns)
        self._build()

    def _weights(self, weights: Any) -> list[float]:
        if weights is None:
            return [1.0] * len(self.specs)
        values = weights if isinstance(weights, list | tuple) else [weights]
        if len(values) != len(self.specs) or not all(
            isinstance(w, numbers.Real) and not isinstance(w, bool) and math.isfinite(w)
            for w in values
        ):
            raise HonedError(
                f"{self.where}: reward_weights must be {len(self.specs)} finite number(s), one "
                f"per reward function, got {weights!r}"
            )
        return [float(w) for w in values]

    # ------------------------------------------------------------------ loading

    def _build(self) -> None:
        self.functions = [self._load(spec) for spec in self.specs]
        names = [f.name for f in self.functions]
        for name in names:
            if names.count(name) > 1:
                raise HonedError(
                    f"{self.where}: two reward functions are named '{name}'; give one another "
                    "name with {function: 'module:function', name: 'other'}"
                )

    def _load(self, spec: Any) -> RewardFunction:
        name = None
        if isinstance(spec, Mapping):
            spec = dict(spec)
            name = spec.pop("name", None)
            if "type" in spec:
                return self._builtin(spec, name)
            if set(spec) != {"function"}:
                raise HonedError(
                    f"{self.where}: a reward entry must be 'module:function', "
                    "{function: 'module:function', name: ...} or {type: llm_judge | "
                    f"reward_model, ...}}, got {spec!r}"
                )
            spec = spec["function"]
        if isinstance(spec, str):
            fn = load_object(ImportSpec.named(spec, "reward function"), "reward function")
        else:
            fn = spec
        if not callable(fn):
            raise HonedError(f"{self.where}: reward function '{spec}' is not callable")
        name = name or getattr(fn, "__name__", None) or type(fn).__name__
        return RewardFunction(
            str(name), fn, spec, self._accepted(fn, spec), inspect.iscoroutinefunction(fn)
        )

    def _builtin(self, spec: dict[str, Any], name: str | None) -> RewardFunction:
        kind = spec.pop("type")
        if kind not in BUILTINS:
            raise HonedError(
                f"{self.where}: unknown reward type {kind!r}; built-in types: "
                + ", ".join(BUILTINS)
            )
        cls = load_object(ImportSpec.parse(BUILTINS[kind]), "reward type")
        try:
            fn = cls(where=f"{self.where}, reward '{name or kind}'", **spec)
        except TypeError as exc:
            raise HonedError(f"{self.where}: reward '{kind}' rejected its settings: {exc}") from exc
        return RewardFunction(str(name or kind), fn, {"type": kind, **spec}, None, False)

    def _accepted(self, fn: Callable[..., Any], spec: Any) -> set[str] | None:
        """The arguments `fn` takes (None: all, through `**kwargs`); fails now if it requires
        one that will not be passed."""
        try:
            parameters = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):  # builtins without a signature: pass everything
            return None
        if any(p.kind is p.VAR_KEYWORD for p in parameters):
            return None
        for p in parameters:
            needed = p.default is p.empty and p.kind is not p.VAR_POSITIONAL
            if needed and (p.kind is p.POSITIONAL_ONLY or p.name not in self.passed):
                raise HonedError(
                    f"{self.where}: reward function '{spec}' requires argument '{p.name}', "
                    "which is not a column of the data (columns: "
                    f"{', '.join(self.columns) or 'none'})"
                )
        return {p.name for p in parameters}

    def __getstate__(self) -> dict[str, Any]:
        # Functions loaded from files, clients and models are rebuilt where the set is unpickled
        # (a Ray worker), from their specs.
        state = dict(self.__dict__)
        del state["functions"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._build()

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.functions]

    # ------------------------------------------------------------------ scoring

    def __call__(self, items: Sequence[Item], kwargs: dict[str, list[Any] | None]) -> Rewarded:
        """The rewards of `items`'s completions; `kwargs` holds every argument, one list entry
        per completion (or `None`: an argument with no value, like `completion_ids` when the
        caller has none)."""
        count = len(items)
        values: dict[str, list[float]] = {}
        problems: list[dict[str, str]] = [{} for _ in range(count)]
        for f in self.functions:
            args = kwargs if f.accepts is None else {k: kwargs[k] for k in f.accepts if k in kwargs}
            if f.is_async:
                values[f.name] = self._per_item(f, args, items, problems)
            else:
                values[f.name] = self._batch(f, args, items, problems)
        rewards = [
            sum(w * values[f.name][i] for w, f in zip(self.weights, self.functions, strict=True))
            for i in range(count)
        ]
        components = [{f.name: values[f.name][i] for f in self.functions} for i in range(count)]
        return Rewarded(rewards, components, problems)

    def _batch(
        self,
        f: RewardFunction,
        args: dict[str, list[Any]],
        items: Sequence[Item],
        problems: list[dict[str, str]],
    ) -> list[float]:
        try:
            result = f.fn(**args)
        except HonedError:
            raise
        except Exception as exc:
            raise HonedError(
                f"reward function '{_shown(f.spec)}' raised {type(exc).__name__}: {exc} "
                f"(scoring {_which(items)})"
            ) from exc
        for i, problem in enumerate(getattr(result, "errors", None) or []):
            if problem:
                problems[i][f.name] = "error"
        return self._checked(f, result, items)

    def _per_item(
        self,
        f: RewardFunction,
        args: dict[str, list[Any]],
        items: Sequence[Item],
        problems: list[dict[str, str]],
    ) -> list[float]:
        calls = [
            f.fn(**{k: None if v is None else v[i : i + 1] for k, v in args.items()})
            for i in range(len(items))
        ]
        outcomes = run_all(calls, self.timeout)
        out = []
        for i, outcome in enumerate(outcomes):
            if outcome.timed_out:
                problems[i][f.name] = "timeout"
                log.warning(
                    "reward function '%s' did not finish within %gs for item '%s'; it scores 0",
                    _shown(f.spec),
                    self.timeout,
                    items[i].key,
                )
                out.append(0.0)
                continue
            out += self._checked(f, _value(outcome, f, items[i]), items[i : i + 1], i)
        return out

    def _checked(
        self, f: RewardFunction, result: Any, items: Sequence[Item], offset: int = 0
    ) -> list[float]:
        """`result` as one finite float per item, or a `HonedError` naming the function and
        the item."""
        who = f"reward function '{_shown(f.spec)}'"
        if hasattr(result, "tolist"):  # NumPy arrays and tensors
            result = result.tolist()
        if not isinstance(result, list | tuple):
            raise HonedError(f"{who} must return a list of floats, got {type(result).__name__}")
        if len(result) != len(items):
            raise HonedError(
                f"{who} returned {len(result)} rewards for {len(items)} completions "
                f"(scoring {_which(items)})"
            )
        rewards = []
        for index, value in enumerate(result):
            if not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise HonedError(
                    f"{who} returned {value!r} at index {index + offset} for item "
                    f"'{items[index].key}'; rewards must be finite numbers"
                )
            rewards.append(float(value))
        return rewards


def _value(outcome: Outcome, f: RewardFunction, item: Item) -> Any:
    if outcome.error is not None:
        error = outcome.error
        raise HonedError(
            f"reward function '{_shown(f.spec)}' raised {type(error).__name__}: {error} "
            f"(scoring item '{item.key}')"
        ) from error
    return outcome.value


def _shown(spec: Any) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, dict):
        return str(spec.get("type", spec))
    return getattr(spec, "__qualname__", repr(spec))


def _which(items: Sequence[Item]) -> str:
    keys = ", ".join(f"'{item.key}'" for item in items[:3])
    more = f" and {len(items) - 3} more" if len(items) > 3 else ""
    return f"item {keys}{more}" if len(items) == 1 else f"items {keys}{more}"
