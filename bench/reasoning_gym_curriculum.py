"""Rollouts to a held-out accuracy on the real model: curriculum arms on a reasoning-gym mixture.

Issue 34, item 5's second benchmark. bench/sample_efficiency.py compares arms on the embedded
tiny policy sorting digits after a supervised warm-start; here the policy is pretrained,
SmolLM2-135M-Instruct under its own chat template, and the items are reasoning-gym's
(`type: reasoning_gym`). Nothing else is new: the arms, the rollout budget, the counting of
every completion generated, the timed training steps, `--collect`, `--results` and the
censoring-aware report are bench/sample_efficiency.py's, run through the same code
(`execute`), with this module's config of a run (`rg_config`, on top of `bench_settings`) and
its report (`rg_report`: bench/sample_efficiency.py's, and the untrained model's accuracies).

The mixture is five environments of one reasoning-gym setting each, the arithmetic ones among
the ten measured on the untrained model (bench/README.md, "Choosing the mixture's settings";
their entries are read from bench/configs/reasoning_gym_settings_a.yaml and _b.yaml): `cs_2x1`
(chain_sum, 2 terms of 1 digit), `cs_2x2`, `ba_2x1` (basic_arithmetic, 2 terms of 1 digit),
`ba_2x2` and `ba_3x1`, from most groups with reward spread at temperature 1 to under a fifth.
No system prompt, the reply read by its last number, equal weights (`--env NAME:1:WEIGHT`,
repeatable, picks others of the ten settings measured there; the level, 1, is the setting
itself). Pilots on seed 39 (bench/README.md, "The pilots") chose the rest: with `gcd_10` and
`gcd_50` in the mixture GRPO made them worse while chain_sum improved, and at 64 tokens with
the learning rate examples/reasoning_gym.yaml had then (2e-5) 1,024 rollouts moved nothing
(the example is now this benchmark's `uniform` arm on seed 43).

- **No warm-start.** Every arm of a seed starts from the same pretrained weights (`sft.steps:
  0`), so the arms' first held-out evaluation is the untrained model's.
- **Splits.** Each environment's own: `--train-per-level` training items (one level per
  environment: the setting), `--validation-size` held-out ones and no test split. The
  environment makes them disjoint by question, so no held-out item is ever trained on. The
  training split is small on purpose: `skip` keeps each item's outcome history by its key
  (`curriculum.skip.key: item`; a difficulty key would be one for all of an environment's
  items), and an item's history only matters if the item comes back.
- **Held-out accuracy** is the validation split's, greedy, the mean over environments of exact
  success, every `--eval-every` steps. Targets are gains over the untrained model's (`--gains`).
- **The prompting baseline.** The `--baseline` arm's run also evaluates the untrained model
  with `--few-shot` (3) solved training examples before each prompt (`eval.few_shot`: earlier
  chat turns) before it trains; the report shows it beside the zero-shot accuracy every arm
  starts from, per seed and per environment. It is measured once per seed (it depends on the
  seed only through the items) and changes nothing in that run's training: evaluation draws
  from no shared random state.
- **Arms** (`--arms`, every arm of bench/sample_efficiency.py): by default `uniform` (DAPO's
  dynamic sampling: a step draws until `--prompts` groups have reward spread, at most
  `--max-rounds` rounds), `uniform-nods` (a fixed batch of `--prompts` groups), `skip+screen-nods`
  (items whose last groups had no spread skipped before rollout, with a probability that grows
  with the streak, and `--screen-rollouts` of each group's `--generations` rollouts first, the
  rest only where they disagree) and `screen`.

Each arm gets `--max-rollouts` completions (every one generated counts, kept or filtered,
screening's included) and the report gives, per target, the rollouts, tokens and training time
(CPU and wall, evaluations left out) each run took to reach it, or that it never did (censored
at its total).

Defaults, sized for a 2-core CPU at one torch thread per run (`--jobs 2 --threads 1`):

- 8 prompts x 8 generations per step at temperature 1 (bench/README.md's measurements of the
  mixture used T = 1), learning rate 5e-5 (the pilots': 2e-5 moved nothing in the budget, 1e-4
  and 1.5e-4 collapsed), 16 sequences per forward/backward pass (`trainer.micro_batch_size`);
- replies of at most 32 tokens, those cut there left out of the loss (`--mask-truncated`,
  `trainer.mask_truncated_completions`): the untrained model writes a sentence around its
  answer, and a step of short replies costs a third of one of 64 tokens;
- 1,024 rollouts per run, 16 steps of a fixed batch (`--max-steps`; arms that screen take more,
  cheaper steps within the same budget);
- 8 training items per environment: an environment gets about 1,024 / 8 / 5 = 26 groups in a
  run, so each item is drawn about twice, more where skipping or screening make candidates
  cheaper;
- 32 held-out items per environment (160 in all: at the untrained model's 0.2 a standard
  error of 0.03), an evaluation every 3 steps; targets +0.05, +0.10 and +0.15.

Time per arm: about 11 minutes on a 2-core AMD EPYC VM at one torch thread while another
seed's runs held the other core (seed 43's four arms took 46 min with their evaluations; steps
of `uniform-nods` 21-23 s, an evaluation of the 160 held-out items about 35 s). The reported
runs (bench/README.md) were two lanes side by side, each one seed's arms after another:

    B="PYTHONPATH=src python bench/reasoning_gym_curriculum.py --jobs 1 --threads 1"
    $B --seeds 43 --out seed43.json; $B --seeds 45 --arms uniform uniform-nods --out seed45a.json
    $B --seeds 44 --out seed44.json; $B --seeds 45 --arms skip+screen-nods screen \\
        --baseline screen --out seed45b.json                                    # the other lane
    PYTHONPATH=src python bench/reasoning_gym_curriculum.py --results seed43.json seed44.json \\
        seed45a.json seed45b.json --plot curve.png                              # the report

(`--jobs 2 --seeds 43 44 45` runs the same, a seed per process, leaving a core idle for the
last seed.)

`--model tiny` runs the same code with the embedded tiny policy (learning nothing: a check that
the benchmark runs end to end, in seconds). The other options are bench/sample_efficiency.py's;
`--results FILE --gains ...` reports saved runs again.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import yaml
from efficiency_report import NOT_RUN, arm_of, mean_sd, report, table
from sample_efficiency import bench_settings, build_parser, env_spec, execute

from honed.config import Config

BENCH = Path(__file__).resolve().parent
# the ten settings measured on the untrained model, by environment name
SETTINGS_FILES = [BENCH / "configs" / f"reasoning_gym_settings_{h}.yaml" for h in ("a", "b")]
# the arithmetic settings of the measured ten; gcd_10 and gcd_50 fell under GRPO on the mixture
# with them (pilot seed 39, bench/README.md)
MIXTURE = ["cs_2x1", "cs_2x2", "ba_2x1", "ba_2x2", "ba_3x1"]
MODELS = {
    "smollm2": {"model": "smollm2-135m-instruct", "chat_template": True},
    # the tiny policy reads characters: three solved examples and a question exceed its 512
    "tiny": {"model": "tiny", "chat_template": True, "tiny": {"max_position_embeddings": 2048}},
}
BUDGET = 1024
PROMPTS = 8
GENERATIONS = 8

SETTING = {
    "seeds": [43, 44, 45],
    "arms": ["uniform", "uniform-nods", "skip+screen-nods", "screen"],
    "env": [env_spec(f"{name}:1:1") for name in MIXTURE],
    "sft_steps": 0,
    "sft_train_per_level": 0,
    "sft_max_level": 0,
    "train_per_level": 8,
    "validation_size": 32,
    "temperature": 1.0,
    "prompts": PROMPTS,
    "generations": GENERATIONS,
    "max_rollouts": BUDGET,
    "max_steps": BUDGET // (PROMPTS * GENERATIONS),
    "max_completion_length": 32,
    "mask_truncated": True,
    "lr": 5e-5,
    "eval_every": 3,
    "gains": [0.05, 0.10, 0.15],
}


@functools.cache
def measured_settings() -> dict[str, dict]:
    """The `type: reasoning_gym` environment entries measured on the untrained model, by name
    (read once per process: every arm's config takes its entries from here, never altering them)."""
    return {
        env["name"]: env
        for path in SETTINGS_FILES
        for env in yaml.safe_load(path.read_text())["envs"]
    }


def rg_config(seed: int, arm: str, args: argparse.Namespace) -> Config:
    """bench/sample_efficiency.py's run (the arm, its budget, its evaluations) on the
    reasoning-gym mixture, with the chosen policy and no warm-start."""
    settings = bench_settings(seed, arm, args)
    measured = measured_settings()
    settings["envs"] = [
        {
            "name": e["name"],
            "type": "reasoning_gym",
            "weight": e["weight"],
            "args": measured[e["name"]]["args"]
            | ({} if args.system_prompt is None else {"system_prompt": args.system_prompt})
            | {
                "size": args.train_per_level,
                "validation_size": args.validation_size,
                "test_size": 0,
            },
        }
        for e in args.env
    ]
    settings["policy"] = MODELS[args.model]
    settings["trainer"]["micro_batch_size"] = args.micro_batch_size
    settings["trainer"]["mask_truncated_completions"] = args.mask_truncated
    settings["eval"]["few_shot"] = args.few_shot if arm == args.baseline else 0
    return Config.model_validate(settings)


def rg_report(args: argparse.Namespace, results: list[dict]) -> None:
    """bench/sample_efficiency.py's report, then the untrained model's held-out accuracy
    zero-shot and with `--few-shot` examples beside each arm's at its end."""
    print(
        f"\nmodel: {MODELS[args.model]['model']} (the report's warm-start is the untrained "
        "model); one reasoning-gym setting per environment (its level 1)"
    )
    report(args, results)
    seeds = [s for s in args.seeds if any(r["seed"] == s for r in results)]
    arms = [a for a in args.arms if any(arm_of(r) == a for r in results)]
    runs = {a: {r["seed"]: r for r in results if arm_of(r) == a} for a in arms}
    start = {r["seed"]: r["start"] for r in results if "start" in r}
    shots = f"{args.few_shot}-shot"
    print(f"\n#### Held-out accuracy: the untrained model zero-shot and {shots}, each arm's end\n")
    rows = []
    for name, values in [
        ("untrained, zero-shot", {s: v["zero_shot"]["mean"] for s, v in start.items()}),
        (f"untrained, {shots}", {s: v["few_shot"]["mean"] for s, v in start.items()}),
        *((f"{a}, final", {s: r["final_accuracy"] for s, r in runs[a].items()}) for a in arms),
    ]:
        cells = [f"{values[s]:.3f}" if s in values else NOT_RUN for s in seeds]
        rows.append([name, *cells, mean_sd([values[s] for s in seeds if s in values])])
    table(["", *(f"seed {s}" for s in seeds), "mean ± sd"], rows)
    differ = [
        s for s in seeds if len({r["warm_start_accuracy"] for r in results if r["seed"] == s}) > 1
    ]
    if differ:
        print(f"\nNOT the same starting accuracy for every arm of seeds {differ}")
    if start:
        envs = [k for k in next(iter(start.values()))["zero_shot"] if k != "mean"]
        print(f"\nthe untrained model per environment (mean over {len(start)} seeds):\n")
        table(
            ["environment", "zero-shot", shots],
            [
                [
                    env,
                    *(
                        mean_sd([v[kind][env] for v in start.values()])
                        for kind in ("zero_shot", "few_shot")
                    ),
                ]
                for env in envs
            ],
        )


def rg_parser() -> argparse.ArgumentParser:
    """bench/sample_efficiency.py's command line with this benchmark's defaults and options."""
    parser = build_parser(__doc__, SETTING)
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument(
        "--micro-batch-size", type=int, default=16, help="sequences per forward/backward pass"
    )
    parser.add_argument(
        "--few-shot",
        type=int,
        default=3,
        help="solved training examples before each prompt in the untrained model's second "
        "held-out evaluation (in the --baseline arm's run)",
    )
    parser.add_argument(
        "--system-prompt",
        help="the system prompt of every environment (default: the measured settings' own, "
        "none: SmolLM2's chat template then adds its default one)",
    )
    parser.add_argument(
        "--mask-truncated",
        action=argparse.BooleanOptionalAction,
        default=SETTING["mask_truncated"],
        help="no loss on replies cut at --max-completion-length "
        "(trainer.mask_truncated_completions)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = rg_parser()
    args = parser.parse_args(argv)
    if args.sft_steps:
        parser.error("--sft-steps: every arm starts from the pretrained model (0)")
    if args.few_shot < 1:
        parser.error("--few-shot: the prompting baseline needs at least one example")
    known = measured_settings()
    for e in args.env or []:
        if e["name"] not in known:
            parser.error(f"--env {e['name']}: not a measured setting ({', '.join(known)})")
    execute(args, SETTING, rg_config, rg_report)


if __name__ == "__main__":
    main()
