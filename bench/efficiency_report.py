"""The tables and the plot of a rollouts-to-target benchmark (bench/sample_efficiency.py and
bench/curriculum_regime.py), from the per-run results those scripts write.

Everything is printed as Markdown tables, to paste into bench/README.md. Every number about
reaching a target is censoring-aware (bench/censoring.py): a run that never got there is shown
as `> its total (censored)`, and no ratio, mean or median is formed from such a bound.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

from censoring import Crossing, censored_median, crossing, ratio, spread

COLOURS = {
    "uniform": "#6a51a3",
    "frontier": "#d94801",
    "competence_based": "#238b45",
    "easy_first": "#2171b5",
    "uniform-nods": "#969696",
    "frontier-nods": "#fdae6b",
}


NOT_RUN = "not run"  # a seed this arm has no result for (e.g. an interrupted benchmark)


def arm_of(result: dict) -> str:
    return result.get("arm") or result["strategy"]  # result files before arms: "strategy"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def mean_sd(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return fmt.format(values[0])
    spread_fmt = fmt.replace("+", "")  # a standard deviation has no sign
    return f"{fmt.format(statistics.fmean(values))} ± {spread_fmt.format(statistics.stdev(values))}"


def median_cell(crossings: Sequence[Crossing], what: str = "rollouts") -> str:
    value, how = censored_median(crossings, what)
    if value is None:
        return how
    text = f"{value:,.0f}"
    return text if how == "exact" else f"{text} ({how.removeprefix('exact; ')})"


def report(args: argparse.Namespace, results: list[dict]) -> None:
    """Per target: each seed's rollouts to it, the censoring-aware median, and each arm's ratio
    to the baseline; then the summary over targets, time, final accuracies, and the plot."""
    print(f"\nsetting: {describe(args)}")
    arms = [a for a in args.arms if any(arm_of(r) == a for r in results)]
    seeds = [s for s in args.seeds if any(r["seed"] == s for r in results)]
    runs = {a: {r["seed"]: r for r in results if arm_of(r) == a} for a in arms}
    base = args.baseline if args.baseline in arms else None
    regime(runs, seeds)
    summary_rows = []
    for gain in args.gains:
        hits = {
            a: {
                s: crossing(r["curve"], gain, r["rollouts_total"], r.get("tokens_total"))
                for s, r in runs[a].items()
            }
            for a in arms
        }
        # tokens to the target, where the results recorded them (issue 34 on)
        tokens = any(c.tokens is not None for by_seed in hits.values() for c in by_seed.values())
        print(f"\n#### Rollouts to warm-start + {gain:g} (step in brackets)\n")
        header = ["arm", *(f"seed {s}" for s in seeds), "median over seeds"]
        table(
            header + (["tokens to target, median"] if tokens else []),
            [
                [
                    a,
                    *(hits[a][s].cell() if s in hits[a] else NOT_RUN for s in seeds),
                    median_cell(list(hits[a].values())),
                    *([median_cell(list(hits[a].values()), "tokens")] if tokens else []),
                ]
                for a in arms
            ],
        )
        if base is None or len(arms) < 2:
            continue
        print(f"\n{'arm':s} / {base}, per seed (`<`, `>`: a bound, one run censored; `–`: both):\n")
        ratio_rows = []
        for a in arms:
            if a == base:
                continue
            # seeds where either run was not made have no ratio (and no bound)
            both = [s for s in seeds if s in hits[a] and s in hits[base]]
            per_seed = {s: ratio(hits[a][s], hits[base][s]) for s in both}
            exact = spread([r.value for r in per_seed.values()])
            medians = [censored_median(list(hits[x].values()))[0] for x in (a, base)]
            of_medians = f"{medians[0] / medians[1]:.2f}" if None not in medians else "–"
            cells = [per_seed[s].cell() if s in per_seed else NOT_RUN for s in seeds]
            ratio_rows.append([a, *cells, exact.text(), of_medians])
            summary_rows.append(
                [
                    f"+{gain:g}",
                    a,
                    f"{sum(not c.censored for c in hits[a].values())} / {len(hits[a])}",
                    f"{sum(not c.censored for c in hits[base].values())} / {len(hits[base])}",
                    exact.text(),
                    of_medians,
                ]
            )
        table(
            ["arm", *(f"seed {s}" for s in seeds), "exact ratios", "ratio of medians"], ratio_rows
        )
    if summary_rows:
        print(f"\n#### Summary: rollouts to target, each arm against {base}\n")
        table(
            [
                "target",
                "arm",
                "arm reached",
                f"{base} reached",
                "exact ratios over seeds",
                "ratio of medians",
            ],
            summary_rows,
        )
    costs(runs, seeds, args.gains)
    if getattr(args, "plot", None):
        plot(runs, args, Path(args.plot))
        print(f"\nplot: {args.plot}")


def regime(runs: dict[str, dict[int, dict]], seeds: Sequence[int]) -> None:
    """Where the runs start: warm-start accuracy, the share of groups with no signal, levels."""
    first = next(iter(runs.values()))
    warm = [first[s]["warm_start_accuracy"] for s in seeds if s in first]
    print(f"\nwarm-start held-out accuracy: {mean_sd(warm)} over {len(warm)} seeds")
    for arm, by_seed in runs.items():
        shares = [
            r["first_step"]["zero_spread"]
            for r in by_seed.values()
            if r.get("first_step", {}).get("zero_spread") is not None
        ]
        drawn = [
            r["first_step"]["groups_drawn"]
            for r in by_seed.values()
            if r.get("first_step", {}).get("groups_drawn") is not None
        ]
        if shares and arm.endswith("-nods"):
            print(
                f"  {arm}: share of the first step's groups with no reward spread "
                f"{mean_sd(shares, '{:.2f}')}"
            )
        elif drawn:
            print(f"  {arm}: groups drawn for the first step {mean_sd(drawn, '{:.0f}')}")
    levels = [r["levels"]["warm_start"] for r in first.values() if r.get("levels")]
    if levels and levels[0]:
        keys = sorted(levels[0], key=lambda k: (k.split("/")[0], int(k.split("/")[1])))
        cells = [f"{k}: {statistics.fmean(lv[k] for lv in levels):.2f}" for k in keys]
        print("  warm-start accuracy by level (mean over seeds): " + ", ".join(cells))


def costs(runs: dict[str, dict[int, dict]], seeds: Sequence[int], gains: Sequence[float]) -> None:
    """Final accuracy, steps, and time: the training steps' CPU time (this process) and wall time
    per run and to the targets (evaluations excluded; wall time depends on the machine's load)."""
    print("\n#### Accuracy, steps and time per run (mean ± sd over seeds)\n")
    rows = []
    for arm, by_seed in runs.items():
        rs = [by_seed[s] for s in seeds if s in by_seed]
        gain = [r["final_accuracy"] - r["warm_start_accuracy"] for r in rs]
        best = [max(p[1] for p in r["curve"]) - r["warm_start_accuracy"] for r in rs]
        cpu = [r["train_cpu_seconds"] for r in rs if "train_cpu_seconds" in r]
        wall = [r["train_wall_seconds"] for r in rs if "train_wall_seconds" in r]
        per_k = [
            1000 * r["train_cpu_seconds"] / r["rollouts_total"]
            for r in rs
            if "train_cpu_seconds" in r
        ]
        useful = [r["groups"]["with_spread"] / r["groups"]["drawn"] for r in rs if "groups" in r]
        batch = [
            r["groups"]["batch_success"] for r in rs if r.get("groups", {}).get("batch_success")
        ]
        rows.append(
            [
                arm,
                mean_sd([r["final_accuracy"] for r in rs]),
                mean_sd(gain, "{:+.3f}"),
                mean_sd(best, "{:+.3f}"),
                mean_sd([r["rollouts_total"] for r in rs], "{:,.0f}"),
                mean_sd([r["steps"] for r in rs if "steps" in r], "{:.0f}"),
                mean_sd(useful, "{:.2f}"),
                mean_sd(batch, "{:.2f}"),
                mean_sd(cpu, "{:,.0f}"),
                mean_sd(per_k, "{:.2f}"),
                mean_sd(wall, "{:,.0f}"),
                mean_sd([r["cpu_seconds"] for r in rs if "cpu_seconds" in r], "{:,.0f}"),
            ]
        )
    table(
        [
            "arm",
            "final accuracy",
            "final − warm-start",
            "best − warm-start",
            "rollouts",
            "steps",
            "groups drawn with spread",
            "success in the trained batches",
            "train CPU s",
            "CPU s per 1k rollouts",
            "train wall s",
            "run CPU s (with evaluations)",
        ],
        rows,
    )
    print("\ntraining CPU seconds to the target (median over seeds, censoring-aware):\n")
    table(
        ["arm", *(f"+{g:g}" for g in gains)],
        [
            [
                arm,
                *(
                    median_cell(
                        [crossing(r["curve"], g, r["rollouts_total"]) for r in by_seed.values()],
                        "cpu_s",
                    )
                    for g in gains
                ),
            ]
            for arm, by_seed in runs.items()
        ],
    )


def seed_mean(runs: Sequence[dict]) -> list[tuple[float, float]]:
    """One arm's runs averaged over seeds along the rollouts axis: at every rollout count where
    some run was evaluated (up to the smallest total, where every run is still defined), the
    mean of each run's latest accuracy so far, never a value it has not measured yet."""
    end = min(r["rollouts_total"] for r in runs)
    grid = sorted({p[2] for r in runs for p in r["curve"] if p[2] <= end})
    return [
        (spent, statistics.fmean([p[1] for p in r["curve"] if p[2] <= spent][-1] for r in runs))
        for spent in grid
    ]


def plot(runs: dict[str, dict[int, dict]], args: argparse.Namespace, out: Path) -> None:
    """Held-out accuracy against rollouts generated: every seed thin, the seed mean thick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    for arm, by_seed in runs.items():
        colour = COLOURS.get(arm)
        for r in by_seed.values():
            ax.plot(
                [p[2] for p in r["curve"]],
                [p[1] for p in r["curve"]],
                color=colour,
                linewidth=0.7,
                alpha=0.3,
            )
        mean = seed_mean(list(by_seed.values()))
        ax.step(
            [m[0] for m in mean],
            [m[1] for m in mean],
            where="post",
            color=colour,
            linewidth=2.2,
            label=arm,
        )
    warm = statistics.fmean(r["warm_start_accuracy"] for r in next(iter(runs.values())).values())
    for gain in (min(args.gains), max(args.gains)):
        ax.axhline(warm + gain, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(
            f"warm-start + {gain:g}", (0, warm + gain), fontsize=7, color="grey", va="bottom"
        )
    ax.set_xlabel("rollouts generated (completions, kept or filtered)")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(f"{len(args.seeds)} seeds (thin) and their mean (thick)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def describe(args: argparse.Namespace) -> str:
    def span(levels: list[int]) -> str:
        return f"level {levels[0]}" if len(levels) == 1 else f"levels {levels[0]}-{levels[-1]}"

    envs = ", ".join(f"{e['name']} {span(e['levels'])} (weight {e['weight']:g})" for e in args.env)
    sampling = (
        f"dynamic sampling up to {args.max_rounds} rounds (arms named *-nods: off)"
        if args.dynamic_sampling
        else "fixed batch"
    )
    if any("screen" in arm for arm in args.arms):
        sampling += f", screening with {args.screen_rollouts} rollouts (arms named *screen*)"
    train = f"{args.train_per_level} per level" if args.train_per_level else "4000 per environment"
    warm = (
        f"{args.sft_train_per_level} per level" if args.sft_train_per_level else "the train split"
    )
    levels = f"levels <= {args.sft_max_level}" if args.sft_max_level else "all levels"
    start = (
        f"warm-start {args.sft_steps} steps on {warm}, {levels}"
        if args.sft_steps
        else "no warm-start (every arm from the same initial policy)"
    )
    return (
        f"{envs}; {start}; "
        f"GRPO train items {train}, validation {args.validation_size} per environment; "
        f"{args.prompts} prompts x {args.generations} per step at temperature "
        f"{args.temperature}, {sampling}; {args.max_rollouts:,} rollouts (at most "
        f"{args.max_steps} steps), lr {args.lr}, eval every {args.eval_every}; "
        f"seeds {' '.join(map(str, args.seeds))}"
    )
