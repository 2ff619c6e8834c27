"""`honed train CONFIG --dry-run`: what a GRPO run would do, checked without training.

The config is validated (it loaded), every environment is built (its arguments checked, its
LLM reader and judge servers asked whether they answer) and its splits loaded (every data
record checked); no model is loaded and nothing is written, so a GPU recipe can be checked on a
laptop before it is sent to a cluster. The plan is a list of (setting, value) rows: the policy
and how it trains, the optimiser and its schedule, the GRPO objective, sampling, the budget in
rollouts, and each environment's items per split and arguments.
"""

from __future__ import annotations

import json
from typing import Any

from honed.config import Config, TrainerConfig
from honed.envs.registry import build_envs
from honed.types import SPLITS


def training_plan(config: Config) -> list[tuple[str, str]]:
    """The plan's rows; builds the environments (their data and servers are checked)."""
    t = config.trainer
    warm = f", {t.warmup_steps} warm-up steps" if t.warmup_steps else ""
    kl = (
        f"{t.kl_estimator} × {t.beta:g}"
        + (" (in the reward)" if t.kl_in_reward else " (in the loss)")
        if t.beta
        else "none"
    )
    rows = [
        ("policy", _policy(config)),
        ("device / dtype", f"{config.policy.device} / {config.policy.dtype}"),
        ("steps", _steps(t)),
        ("batch", f"{t.prompts_per_step} prompts × {t.num_generations} generations per step"),
        ("rollouts", str(t.max_steps * t.prompts_per_step * t.num_generations)),
        ("learning rate", f"{t.learning_rate:g}, {t.lr_scheduler_type}{warm}"),
        (
            "objective",
            f"{t.loss_type} aggregation, clip {t.epsilon:g}–{t.clip_high:g}, {t.num_iterations} update(s) per batch",
        ),
        ("KL", kl),
        (
            "sampling",
            f"temperature {t.temperature:g}, top_p {t.top_p:g}, ≤ {t.max_completion_length} completion tokens",
        ),
        ("warm-start", f"{config.sft.steps} SFT steps" if config.sft.steps else "none"),
        ("rollouts on", _backend(config)),
        (
            "evaluation",
            f"{config.eval.split} split, {config.eval.num_items or 'all'} items, every {config.eval.every or 'end'} step(s)",
        ),
    ]
    for name, env in build_envs(config.envs, config.seed).items():
        sizes = ", ".join(f"{s} {len(env.items(s))}" for s in SPLITS)
        rows.append((f"env {name}", sizes))
        args = next(e.args for e in config.envs if e.name == name)
        rows += [(f"env {name}.{key}", _short(value)) for key, value in args.items()]
    return rows


def _policy(config: Config) -> str:
    p = config.policy
    mode = (
        f"LoRA r={p.lora.r}, alpha={p.lora.alpha:g} on {p.lora.target_modules}"
        if p.lora
        else "full fine-tuning"
    )
    ckpt = ", gradient checkpointing" if p.gradient_checkpointing else ""
    return f"{p.model} ({mode}{ckpt})"


def _backend(config: Config) -> str:
    d = config.distributed
    if d.backend == "server" and d.server is not None:
        return f"servers {', '.join(d.server.base_url)} ({d.server.model}), weight sync {d.server.weight_sync}"
    if d.backend == "ray":
        return f"{d.num_rollout_workers} Ray workers"
    if d.backend == "atropos":
        pushed = (
            f"; weights to {', '.join(d.server.base_url)} ({d.server.weight_sync})"
            if d.server is not None
            else "; the environments' server keeps its weights"
        )
        return f"Atropos environments, pulled from the trajectory API at {d.api_url}{pushed}"
    return "the learner processes (honed train --nproc N: one per GPU)"


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def _steps(t: TrainerConfig) -> str:
    """`max_steps`, with the other limits that may end the run first."""
    limits = [f"≤ {t.max_rollouts} rollouts"] if t.max_rollouts else []
    limits += [f"≤ {t.max_time_s:g} s"] if t.max_time_s else []
    return f"{t.max_steps} ({', '.join(limits)})" if limits else str(t.max_steps)
