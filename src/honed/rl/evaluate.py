"""Held-out evaluation of a policy on environments' test (or validation) splits.

`accuracy` is the mean over environments of each one's exact-task success rate, so a large
environment does not drown a small one; per-environment and per-level numbers are reported too.
With several completions per item (`eval.samples`), `pass@j` is reported beside the means
(`pass_at`): one answer and the best of eight sampled ones measure different things, and RL
that raises the first may lower the second (it narrows what the policy samples), so both are
worth watching.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from honed.envs.base import Environment, Reporting, Sample, SingleTurnEnv, Table
from honed.envs.metrics import step_metrics
from honed.models.dropout import eval_mode
from honed.models.policy import Policy, PolicySampler, SamplingParams
from honed.types import Group, Message, Prompt, prompt_text

GREEDY = SamplingParams(temperature=0.0)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def pass_at(successes: Sequence[float], j: int) -> float:
    """The expected best success among `j` of an item's n completions drawn without
    replacement, from all n: with the successes sorted ascending, the i-th (from 1) is the
    best of a j-subset in C(i-1, j-1) of the C(n, j) subsets. For 0/1 successes with c right
    this is 1 - C(n-c, j)/C(n, j), the unbiased pass@j estimator (Chen et al., 2021); it
    takes partial successes (a memory agent's share of questions answered) as they are."""
    n = len(successes)
    if not 1 <= j <= n:
        raise ValueError(f"pass@{j} needs 1 <= j <= {n} completions")
    ranked = sorted(successes)
    total = math.comb(n, j)
    return sum(s * math.comb(i, j - 1) for i, s in enumerate(ranked)) / total


def pass_sizes(k: int) -> list[int]:
    """The j reported for k completions an item: 1, 2, 4, ... below k, and k."""
    return [j for j in (2**e for e in range(k.bit_length())) if j < k] + [k]


def summarise_groups(name: str, groups: list[Group]) -> dict[str, float]:
    """Means over every trajectory, and with groups of k > 1 completions the mean over items
    of `pass@j` for j in `pass_sizes(k)`."""
    trajs = [(g, t) for g in groups for t in g.trajectories]
    out = {
        f"{name}/accuracy": _mean([t.success for _, t in trajs]),
        f"{name}/reward": _mean([t.reward for _, t in trajs]),
        f"{name}/completion_length": _mean(
            [float(sum(len(s.completion_ids) for s in t.segments)) for _, t in trajs]
        ),
    }
    components: dict[str, list[float]] = defaultdict(list)
    levels: dict[int, list[float]] = defaultdict(list)
    for g, t in trajs:
        for key, value in t.components.items():
            components[key].append(float(value))
        if g.level is not None:
            levels[g.level].append(t.success)
    for key, values in components.items():
        out[f"{name}/{key}"] = _mean(values)
    for level, values in sorted(levels.items()):
        out[f"{name}/level_{level}/accuracy"] = _mean(values)
    k = min((len(g.trajectories) for g in groups), default=1)
    if k > 1:
        for j in pass_sizes(k):
            out[f"{name}/pass@{j}"] = _mean(
                [pass_at([t.success for t in g.trajectories], j) for g in groups]
            )
    return out


class FewShotSampler:
    """A generator that puts solved examples before every prompt: how well the model does with
    the best prompt it could be given instead of training, the baseline RL has to beat.

    Under a chat template the examples are earlier user and assistant turns (after any system
    message of the prompt); without one they are `prompt + answer` blocks separated by blank
    lines before the prompt.
    """

    def __init__(self, inner: PolicySampler, examples: Sequence[tuple[Prompt, str]]) -> None:
        self.inner = inner
        self.examples = list(examples)
        self.chat = inner.policy.chat_template

    def wrap(self, prompt: Prompt) -> Prompt:
        if not self.chat:
            blocks = [f"{p}{answer}" for p, answer in self.examples if isinstance(p, str)]
            return "\n\n".join([*blocks, prompt]) if isinstance(prompt, str) else prompt
        turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        system = [m for m in turns if m["role"] == "system"]
        shots: list[Message] = []
        for p, answer in self.examples:
            asked = [{"role": "user", "content": p}] if isinstance(p, str) else p
            shots += [m for m in asked if m["role"] != "system"]
            shots.append({"role": "assistant", "content": answer})
        return [*system, *shots, *(m for m in turns if m["role"] != "system")]

    def encode(self, prompt: Prompt) -> list[int]:
        return self.inner.encode(self.wrap(prompt))

    def generate(self, prompts: Sequence[Prompt | list[int]], seeds: Sequence[int]) -> list[Sample]:
        wrapped = [p if p and isinstance(p[0], int) else self.wrap(p) for p in prompts]
        return self.inner.generate(wrapped, seeds)


class MemoSampler(PolicySampler):
    """A `PolicySampler` that answers a (prompt, seed) it has sampled before from memory.

    `honed eval` rolls the evaluated policy out for its metrics and then again in an
    environment's report, on the same items with the same seeds. By the `Generator` contract
    the second rollout's completions are the first's, so it replays them: on a real model each
    rollout of a long-memory environment takes minutes.
    """

    def __init__(self, policy: Policy, params: SamplingParams) -> None:
        super().__init__(policy, params)
        self._seen: dict[tuple[str | tuple[int, ...], int], Sample] = {}

    def generate(self, prompts: Sequence[Prompt | list[int]], seeds: Sequence[int]) -> list[Sample]:
        keys = [
            (tuple(p) if p and isinstance(p[0], int) else prompt_text(p), seed)  # type: ignore[arg-type]
            for p, seed in zip(prompts, seeds, strict=True)
        ]
        todo = {key: i for i, key in enumerate(keys) if key not in self._seen}
        if todo:
            fresh = super().generate([prompts[i] for i in todo.values()], [k[1] for k in todo])
            self._seen.update(zip(todo, fresh, strict=True))
        return [copy.deepcopy(self._seen[key]) for key in keys]


def few_shot_examples(env: Environment, count: int) -> list[tuple[Prompt, str]]:
    """The first `count` solved examples of the train split (never held-out items)."""
    out: list[tuple[Prompt, str]] = []
    for item in env.items("train"):
        out += env.sft_examples(item)[:1]
        if len(out) == count:
            break
    return out


def evaluate(
    policy: Policy,
    envs: Mapping[str, Environment],
    split: str = "test",
    num_items: int | None = 200,
    temperature: float = 0.0,
    max_tokens: int = 256,
    top_p: float = 1.0,
    seed: int = 0,
    few_shot: int = 0,
    sampler: PolicySampler | None = None,
    samples: int = 1,
) -> dict[str, float]:
    """Metric name → value; always includes `accuracy` and `reward`, and with `samples` (k)
    completions an item above 1, `pass@j` (the mean over environments of theirs).

    With `few_shot > 0`, every single-turn environment's prompts carry that many solved train
    examples (`FewShotSampler`); environments of other kinds are left out. `sampler`, given,
    samples the policy instead of one with the settings above (a `MemoSampler` that a report
    then replays).
    """
    sampler = sampler or PolicySampler(policy, SamplingParams(temperature, top_p, max_tokens))
    results: dict[str, float] = {}
    accuracies, rewards = [], []
    passes: dict[int, list[float]] = defaultdict(list)
    with eval_mode(policy.model):
        for name, env in envs.items():
            if few_shot and not isinstance(env, SingleTurnEnv):
                continue
            items = list(env.items(split))
            if num_items is not None:
                items = items[:num_items]
            if not items:
                continue
            generator = (
                FewShotSampler(sampler, few_shot_examples(env, few_shot)) if few_shot else sampler
            )
            groups = env.rollout(items, generator, samples, seed)
            stats = {**summarise_groups(name, groups), **step_metrics({name: env}, groups)}
            results.update(stats)
            accuracies.append(stats[f"{name}/accuracy"])
            rewards.append(stats[f"{name}/reward"])
            for j in pass_sizes(samples) if samples > 1 else []:
                passes[j].append(stats[f"{name}/pass@{j}"])
    results["accuracy"] = _mean(accuracies)
    results["reward"] = _mean(rewards)
    for j, values in passes.items():
        results[f"pass@{j}"] = _mean(values)
    return results


def env_reports(
    agents: Mapping[str, Policy | PolicySampler],
    envs: Mapping[str, Environment],
    split: str = "test",
    num_items: int | None = 200,
    params: SamplingParams = GREEDY,
    seed: int = 0,
) -> dict[str, Table]:
    """Each reporting environment's table (`Reporting`), with every agent on the same items: a
    policy sampled with `params`, or a sampler as it is (one that has rolled out already)."""
    reporting = {name: env for name, env in envs.items() if isinstance(env, Reporting)}
    if not reporting:
        return {}
    samplers = {
        label: agent if isinstance(agent, PolicySampler) else PolicySampler(agent, params)
        for label, agent in agents.items()
    }
    with eval_mode(*(sampler.policy.model for sampler in samplers.values())):
        return {
            name: env.report(samplers, split, num_items, seed) for name, env in reporting.items()
        }
