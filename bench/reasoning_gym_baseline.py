"""An untrained policy on reasoning_gym environments: is there anything for GRPO to learn from?

For every environment of the config, on the first `eval.num_items` items of the eval split:
greedy accuracy, and with `--samples` completions per item at `--temperature`, the accuracy and
the share of groups whose rewards differ (a group where every completion scores the same gives
GRPO nothing; in training the environment logs it per task, `reward/<env>/<task>/groups_with_spread`),
and the share whose success differs (the same without the partial credit some tasks give). Each reply is scored
as the config reads it and again under every `--also` answer format (the same replies: only the
extraction changes), which shows how much the format alone decides.

    PYTHONPATH=src python bench/reasoning_gym_baseline.py bench/configs/reasoning_gym_smollm2.yaml

`-o key=value` overrides the config as on the command line; `--out FILE` writes the table as
JSON. `honed eval CHECKPOINT --config CONFIG --out FILE` gives the same greedy accuracies.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from honed.config import load_config
from honed.envs.reasoning_gym import ReasoningGymEnv
from honed.models.policy import Policy, PolicySampler, SamplingParams
from honed.rl.trainer import build_envs
from honed.types import Group, Item, Trajectory, derive_seed


def rescored(env: ReasoningGymEnv, items: list[Item], groups: list[Group]) -> list[Group]:
    """The same completions scored by `env` (another answer format)."""
    by_key = {i.key: i for i in items}
    out = []
    for g in groups:
        replies = [t.completion_text for t in g.trajectories]
        scores = env.score_batch([by_key[g.item_key]] * len(replies), replies)
        trajectories = [
            Trajectory(t.segments, s.reward, s.success, s.components, t.prompt_text, text)
            for t, s, text in zip(g.trajectories, scores, replies, strict=True)
        ]
        out.append(Group(g.env, g.item_key, trajectories, g.level))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--also", nargs="*", default=["raw"], help="answer formats to rescore")
    parser.add_argument("--out")
    args = parser.parse_args()

    config = load_config(args.config, args.override)
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    envs = build_envs(config)
    policy = Policy.from_config(config.policy, config.seed)
    policy.model.eval()
    max_tokens = config.trainer.max_completion_length
    greedy = PolicySampler(policy, SamplingParams(0.0, 1.0, max_tokens))
    sampled = PolicySampler(
        policy, SamplingParams(args.temperature, config.trainer.top_p, max_tokens)
    )
    seed = derive_seed(config.seed, "eval")
    rows = []
    for entry in config.envs:
        env = envs[entry.name]
        if not isinstance(env, ReasoningGymEnv):
            continue
        items = env.items(config.eval.split)[: config.eval.num_items]
        started = time.perf_counter()
        runs = {
            "greedy": env.rollout(items, greedy, 1, seed),
            "sampled": env.rollout(items, sampled, args.samples, seed),
        }
        seconds = time.perf_counter() - started
        formats = {env.answer_format: env}
        for fmt in args.also:
            formats[fmt] = ReasoningGymEnv(
                env.name, env.seed, **{**entry.args, "answer_format": fmt}
            )
        for fmt, scorer in formats.items():
            row = {"env": env.name, "answer_format": fmt, "items": len(items)}
            for mode, groups in runs.items():
                if scorer is not env:
                    groups = rescored(scorer, items, groups)
                trajectories = [t for g in groups for t in g.trajectories]
                row[f"{mode}/accuracy"] = sum(t.success for t in trajectories) / len(trajectories)
                row[f"{mode}/reward"] = sum(t.reward for t in trajectories) / len(trajectories)
                row[f"{mode}/truncated"] = sum(t.truncated for t in trajectories) / len(
                    trajectories
                )
                if mode == "sampled":
                    spread = [len(set(g.rewards())) > 1 for g in groups]
                    row["sampled/groups_with_spread"] = sum(spread) / len(spread)
                    # spread in success alone: without the partial credit some tasks give
                    solved = [len({t.success for t in g.trajectories}) > 1 for g in groups]
                    row["sampled/groups_with_success_spread"] = sum(solved) / len(solved)
            row["seconds"] = round(seconds, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
        example = runs["greedy"][0].trajectories[0].completion_text
        print(f"# {env.name}: a greedy reply: {example!r}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
