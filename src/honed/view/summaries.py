"""One line per run for the runs page: what it trains, how far it got, how it ended."""

from __future__ import annotations

from typing import Any

from honed.view.catalog import RunFiles, kind, read_config, status
from honed.view.metrics import MetricsCache

# The latest values shown beside each run, when it logs them.
HEADLINE = (
    "reward/mean",
    "success/mean",
    "eval/accuracy",
    "kl",
    "entropy",
    "completions/mean_length",
    "train_hard",
    "metric_after",
)


def run_summary(run: RunFiles, cache: MetricsCache) -> dict[str, Any]:
    config = read_config(run)
    run_kind = kind(run, config)
    _, rows = cache.rows(run)
    times = [float(r["time"]) for r in rows if isinstance(r.get("time"), int | float)]
    state = status(run, times)
    summary = run.json("summary.json", default={})
    summary = summary if isinstance(summary, dict) else {}
    latest: dict[str, Any] = {}
    for row in rows:
        latest.update({k: v for k, v in row.items() if k in HEADLINE and v is not None})
    steps = max((int(r["step"]) for r in rows), default=0)
    out = {
        "id": run.id,
        "name": run.dir.name,
        "kind": run_kind,
        "status": state.state,
        "error": state.error,
        "updated": state.updated,
        "started": times[0] if times else None,
        "steps": steps,
        "max_steps": _max_steps(config, run_kind),
        "config": config_summary(config, run_kind),
        "latest": latest,
        "final": _final(summary, run_kind),
        "has_rollouts": run.exists("rollouts") or run.exists("steps"),
    }
    if run_kind == "skills":
        state_file = run.json("state.json", default={})
        if isinstance(state_file, dict):
            out["steps"] = max(steps, int(state_file.get("step", 0) or 0))
    return out


def _max_steps(config: dict[str, Any], run_kind: str) -> int | None:
    section = config.get("trainer" if run_kind == "grpo" else "train")
    if not isinstance(section, dict):
        return None
    if run_kind == "grpo":
        value = section.get("max_steps")
    else:
        value = section.get("max_steps") or _product(
            section.get("epochs"), section.get("steps_per_epoch")
        )
    return int(value) if isinstance(value, int | float) else None


def _product(a: Any, b: Any) -> int | None:
    return int(a) * int(b) if isinstance(a, int) and isinstance(b, int) else None


def config_summary(config: dict[str, Any], run_kind: str) -> dict[str, Any]:
    """The settings a person tells runs apart by."""
    envs = config.get("envs") if isinstance(config.get("envs"), list) else []
    names = [
        str(e.get("name"))
        + (f" ({e['type']})" if e.get("type") not in (None, e.get("name")) else "")
        for e in envs
        if isinstance(e, dict)
    ]
    out: dict[str, Any] = {"seed": config.get("seed"), "envs": names}
    section = _dict(config, "curriculum")
    out["curriculum"] = section.get("strategy")
    if run_kind == "grpo":
        trainer = _dict(config, "trainer")
        out["model"] = _dict(config, "policy").get("model")
        for key in ("loss_type", "learning_rate", "prompts_per_step", "num_generations", "beta"):
            out[key] = trainer.get(key)
        out["backend"] = _dict(config, "distributed").get("backend")
    else:
        out["model"] = _dict(config, "target").get("model")
        out["reflector"] = _dict(config, "reflector").get("model")
        budget = _dict(config, "edit_budget")
        out["edit_budget"] = f"{budget.get('mode')} {budget.get('max_lr')}→{budget.get('min_lr')}"
        out["gate"] = _dict(config, "gate").get("mode")
    return out


def _dict(config: dict[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def _final(summary: dict[str, Any], run_kind: str) -> dict[str, Any]:
    """The end result in summary.json: held-out accuracy before and after (GRPO), or the
    selection and held-out scores of the initial and best skills."""
    if not summary:
        return {}
    if run_kind == "grpo":
        initial = _dict(summary, "initial_eval")
        final = _dict(summary, "final_eval")
        return {
            "initial_accuracy": initial.get("accuracy"),
            "final_accuracy": final.get("accuracy"),
            "rollouts": summary.get("rollouts"),
            "seconds": summary.get("seconds"),
        }
    evaluation = _dict(summary, "eval")
    return {
        "initial_hard": _dict(evaluation, "initial").get("hard"),
        "best_hard": _dict(evaluation, "best").get("hard"),
        "best_version": summary.get("best_version"),
        "seconds": summary.get("seconds"),
    }
