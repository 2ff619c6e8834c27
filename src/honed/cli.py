"""The `honed` command line: parse, build, call. The work happens in the trainers."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, get_args

from honed import __version__
from honed.config import Config, DtypeName, dump_config, load_config, load_model
from honed.errors import HonedDeprecationWarning, HonedError
from honed.models.sources import is_checkpoint
from honed.runs import run_state
from honed.runs.files import (
    atomic_write_dir,
    atomic_write_json,
    check_tree,
    confined,
    copy_file,
    read_text,
    run_file_argument,
)
from honed.runs.lifecycle import RunInterrupted
from honed.runs.progress import Reporter
from honed.runs.rundir import STATE_FILE, RunDir
from honed.runs.trust import load_run_config
from honed.text import one_line, redact
from honed.yaml_data import load_yaml

if TYPE_CHECKING:
    from pydantic import BaseModel

    from honed.models.policy import Policy, PolicySampler
    from honed.skills.config import SkillsConfig
    from honed.skills.rundir import SkillRunDir

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

DESCRIPTION = """\
Train LLM agents by reinforcement (GRPO) and by reflection (skill optimisation).

  honed train examples/quickstart.yaml                     train with GRPO
  honed train CONFIG -o trainer.max_steps=20 -o policy.model=DIR
  honed train CONFIG --resume                              continue from the latest checkpoint
  honed eval runs/quickstart --split test                  evaluate a run or a checkpoint
  honed export runs/quickstart OUT_DIR                     the model as a plain HF folder
  honed sft CONFIG                                         supervised warm-start only
  honed skills train examples/skills_qa.yaml               optimise a skill document
  honed skills eval examples/skills_qa.yaml --skill best_skill.md --run-dir runs/skills_qa
  honed view runs/                                         look at runs in a browser
  honed serve runs/quickstart                              the trained policy as an OpenAI API
  honed config CONFIG                                      the resolved config, each key's help
  honed config --schema > honed.schema.json                its JSON schema, for editors
"""


def _add_eval_parser(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "eval",
        help="evaluate a run or a checkpoint",
        description="Evaluate the latest checkpoint of a run directory, or a "
        "given checkpoint directory, on a held-out split.",
    )
    ev.add_argument("path", metavar="RUN_DIR_OR_CHECKPOINT")
    ev.add_argument("--split", default="test", choices=["train", "validation", "test"])
    ev.add_argument("--num-items", type=int, help="items per environment (default: config)")
    ev.add_argument("--config", help="the config to evaluate with (default: the run's own)")
    ev.add_argument(
        "--trust-run-config",
        action="store_true",
        help="use the run's own config even if it imports code or contacts hosts",
    )
    ev.add_argument("--out", help="where the results go (default: the run's eval/ folder)")
    ev.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--quiet", action="store_true")


def _add_export_parser(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser(
        "export",
        help="write a run's model as a plain Hugging Face folder",
        description="Copy the model of a run's latest checkpoint (or of a given checkpoint) into "
        "OUT_DIR as a plain Hugging Face folder (config, safetensors weights, tokenizer, chat "
        "template) that transformers loads without honed; the trainer state stays behind.",
    )
    export.add_argument("path", metavar="RUN_DIR_OR_CHECKPOINT")
    export.add_argument("out", metavar="OUT_DIR")
    export.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")


def _add_view_parser(sub: argparse._SubParsersAction) -> None:
    view = sub.add_parser(
        "view",
        help="look at runs in a browser",
        description="Serve a local web app over the runs under a folder (or one run): curves, "
        "rollouts, curricula, skill versions and edits. Reads the runs, never writes them; "
        "needs the view extra (pip install 'honed[view]').",
    )
    view.add_argument(
        "root", nargs="?", default="runs", metavar="RUN_DIR_OR_RUNS_ROOT", help="default: runs"
    )
    view.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    view.add_argument("--host", default="127.0.0.1", help="address to listen on")


def _add_show_config_parser(sub: argparse._SubParsersAction, loop: str, command: str) -> None:
    """`honed config` (GRPO) or `honed skills config`: the config as `command` resolves it."""
    show = sub.add_parser(
        "config",
        help=f"print a {loop} config resolved, each key with its description",
        description=f"Print CONFIG as `{command}` resolves it (the YAML file, then the -o "
        "overrides): every key with its value, and above it a comment with its description, "
        "type and default; the output is itself a valid config. With --schema, print the "
        "config's JSON schema instead, which editors validate and complete YAML with (README, "
        "configuration reference).",
    )
    show.add_argument("config", nargs="?", help="YAML config file (default: the defaults)")
    show.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value by its dotted key, as for train (repeatable)",
    )
    show.add_argument(
        "--schema", action="store_true", help="print the JSON schema of every such config"
    )


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML config file (see examples/)")
    p.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value by its dotted key, e.g. -o trainer.max_steps=20 "
        "(repeatable; list items by index: -o envs.0.weight=2)",
    )
    p.add_argument(
        "--run-dir",
        help="where the run is written (default: config run_dir, else runs/<config name>)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar or tables")


def _add_serve_parser(sub: argparse._SubParsersAction) -> None:
    """`honed serve`'s arguments. Long because each option is one `add_argument` with its help;
    there is nothing to factor out."""
    serve = sub.add_parser(
        "serve",
        help="serve a policy over an OpenAI-compatible API",
        description="Serve a model, a checkpoint or a run's latest checkpoint over "
        "OpenAI's completions and chat API (and SGLang's /generate and "
        "/update_weights_from_disk), batching concurrent requests; listens on 127.0.0.1. "
        "Needs the serve extra (pip install 'honed[serve]').",
    )
    serve.add_argument(
        "source",
        metavar="CHECKPOINT_OR_MODEL",
        help="a run directory, a checkpoint, a Hugging Face folder, or a policy.model name "
        "(tiny, smollm2-135m-instruct, a Hub id in the local cache)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument(
        "--served-model-name", dest="name", help="the model's name in the API (default: SOURCE)"
    )
    serve.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="the environment variable holding the key clients must send as a bearer token",
    )
    serve.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    serve.add_argument("--dtype", default="auto", choices=("auto", *get_args(DtypeName)))
    serve.add_argument("--seed", type=int, default=0, help="initialises the tiny policy")
    serve.add_argument(
        "--max-batch", type=int, default=32, help="most completions generated together"
    )
    serve.add_argument(
        "--batch-window-ms",
        type=float,
        default=10.0,
        help="a batch takes the requests that follow within this many ms of the last "
        "(10 windows at most)",
    )
    serve.add_argument(
        "--default-max-tokens",
        type=int,
        default=256,
        help="max_tokens of a request that names none",
    )
    serve.add_argument(
        "--weights-dir",
        dest="weights_dirs",
        action="append",
        default=[],
        metavar="DIR",
        help="allow /update_weights_from_disk to load folders inside DIR (repeatable); "
        "without it reloads are refused",
    )
    serve.add_argument("--ssl-certfile", help="serve https with this certificate")
    serve.add_argument("--ssl-keyfile", help="the certificate's private key")
    serve.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="listen beyond 127.0.0.1 without a key",
    )
    serve.add_argument(
        "--allow-insecure-http",
        action="store_true",
        help="take the key over plain http beyond 127.0.0.1 (a network of your own)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="honed", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"honed {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = sub.add_parser(
        "train",
        help="train a policy with GRPO",
        description="Train a policy with GRPO (after an optional warm-start).",
    )
    _add_config_args(train)
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir from its latest checkpoint",
    )
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an existing run in --run-dir and start again",
    )
    train.add_argument(
        "--dry-run",
        action="store_true",
        help="check the config, the environments' data and servers, print the plan and stop; "
        "loads no model, writes nothing",
    )
    train.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="learner processes on this machine, one per GPU (data-parallel; "
        "trainer.parallel chooses ddp or fsdp); torchrun --nproc-per-node N -m honed train "
        "does the same and spans machines",
    )

    sft = sub.add_parser(
        "sft",
        help="supervised warm-start only",
        description="Supervised training on the environments' reference "
        "solutions; writes checkpoints/warmstart/ and evaluates it.",
    )
    _add_config_args(sft)
    sft.add_argument("--overwrite", action="store_true", help="replace an existing warm-start")

    _add_eval_parser(sub)
    _add_export_parser(sub)
    _add_skills_parser(sub)
    _add_view_parser(sub)
    _add_serve_parser(sub)
    _add_show_config_parser(sub, "GRPO", "honed train")
    return parser


def _add_skills_parser(sub: argparse._SubParsersAction) -> None:
    skills = sub.add_parser(
        "skills",
        help="optimise a skill document by reflection",
        description="Train a skill document (Markdown the agent reads in its system prompt) "
        "by reflection under an edit budget, against OpenAI-compatible chat servers; see "
        "docs/skills.md.",
    )
    group = skills.add_subparsers(dest="skills_command", metavar="SUBCOMMAND", required=True)
    train = group.add_parser(
        "train",
        help="optimise a skill on the configured environments",
        description="Optimise a skill document; writes skills/vNNNN.md, best_skill.md, "
        "steps/ and summary.json in the run directory.",
    )
    _add_config_args(train)
    train.add_argument(
        "--resume", action="store_true", help="continue the run in --run-dir after its last step"
    )
    train.add_argument(
        "--overwrite", action="store_true", help="delete an existing run in --run-dir first"
    )
    train.add_argument(
        "--dry-run",
        action="store_true",
        help="check the config and both servers, print the most calls and about how many "
        "tokens (and USD, with price:) the run will spend, and stop; writes nothing",
    )
    ev = group.add_parser(
        "eval",
        help="score a skill file on a split",
        description="Score a skill file with the target model on a split of the configured "
        "environments. Give a CONFIG, or --run-dir to use a run's config and answer cache.",
    )
    ev.add_argument("config", nargs="?", help="skills YAML config (default: the run's)")
    ev.add_argument("--skill", required=True, help="the skill file (Markdown)")
    ev.add_argument("--split", default="test", choices=["train", "validation", "test"])
    ev.add_argument("--run-dir", help="a skills run: its config, cache and eval/ folder")
    ev.add_argument(
        "--trust-run-config",
        action="store_true",
        help="use the run's own config although it names servers or code (keys are not sent)",
    )
    ev.add_argument("--num-items", type=int, help="items per environment (default: config)")
    ev.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--quiet", action="store_true")
    _add_show_config_parser(group, "skills", "honed skills train")


RunT = TypeVar("RunT", bound=RunDir)


def resolve_run_dir(
    args: argparse.Namespace, config: Config | SkillsConfig, kind: type[RunT] = RunDir
) -> RunT:
    """The run directory (`kind`: GRPO's or the skill loop's) the command line or config names."""
    if args.run_dir:
        return kind(args.run_dir)
    if config.run_dir:
        return kind(config.run_dir)
    return kind(Path("runs") / Path(args.config).stem)


def cmd_train(args: argparse.Namespace) -> int:
    from honed.rl.trainer import GRPOTrainer

    if args.nproc < 1:
        raise HonedError(f"--nproc must be at least 1, not {args.nproc}")
    if args.dry_run:
        return train_dry_run(load_config(args.config, args.override), args)
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        from honed.distributed.launch import launch

        config = load_config(args.config, args.override)  # a bad config stops here, once
        if args.resume:  # so does a run another process is training
            run = resolve_run_dir(args, config)
            run_state.refuse_if_running(run.file(run_state.FILE), run.path)
        return launch(_without_nproc(args.argv), args.nproc)
    main_process = os.environ.get("RANK", "0") == "0"
    config = load_config(args.config, args.override)
    run = resolve_run_dir(args, config)
    if not (args.resume or args.overwrite) and main_process:
        _refuse_to_replace(run)
    if args.overwrite and main_process:
        run.clear()  # what honed wrote there; nothing else
    reporter = Reporter(enabled=not args.quiet and config.logging.progress and main_process)
    reporter.note(f"run directory: {run.describe()}")
    trainer = GRPOTrainer(config, run, reporter)
    summary = trainer.train(resume=args.resume)
    start = "warm-start" if config.sft.steps else "untrained"
    shots = config.eval.few_shot
    reporter.comparison(
        f"held-out {config.eval.split} evaluation",
        summary["initial_eval"],
        summary["final_eval"],
        labels=(f"{start}, as prompted", "trained"),
        baselines={f"{start}, {shots}-shot": summary["initial_eval_few_shot"]} if shots else None,
    )
    reporter.table(
        f"training by environment (curriculum: {config.curriculum.strategy})",
        [
            "environment",
            "reward, first 10 steps",
            "reward, last 10 steps",
            "items per bin (easy→hard)",
        ],
        [
            [
                name,
                _fmt(env["train_reward_first_10"]),
                _fmt(env["train_reward_last_10"]),
                " ".join(map(str, env["curriculum_bins"])),
            ]
            for name, env in summary["environments"].items()
        ],
    )
    reporter.note(f"summary: {run.summary_path}")
    return 0


def _refuse_to_replace(run: RunDir) -> None:
    """A GRPO run already in `run` is not replaced unless asked (`--resume`, `--overwrite`)."""
    if not (run.config_path.exists() and run.has_steps()):
        return
    if run.latest_checkpoint() is None:
        raise HonedError(
            f"{run.path} holds a run that stopped before its first checkpoint; pass --overwrite "
            "to start it again (--resume would start it over too) or --run-dir to start another"
        )
    raise HonedError(
        f"{run.path} already holds a run; pass --resume to continue it, --overwrite to "
        "replace it, or --run-dir to start another"
    )


def train_dry_run(config: Config, args: argparse.Namespace) -> int:
    """`honed train --dry-run`: the plan (`honed.rl.plan`), with nothing loaded or written."""
    from honed.rl.plan import training_plan

    reporter = Reporter(enabled=not args.quiet)
    rows = training_plan(config)
    reporter.table(f"training plan: {args.config}", ["setting", "value"], rows)
    reporter.note(
        f"dry run: nothing was written; the run would go to {resolve_run_dir(args, config).path}"
    )
    return 0


def _without_nproc(argv: list[str]) -> list[str]:
    """The command line each learner process runs: this one without `--nproc N`."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def cmd_sft(args: argparse.Namespace) -> int:
    from honed.rl.trainer import GRPOTrainer

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise HonedError(
            "honed sft runs in one process; on several, honed train --nproc N (or torchrun) "
            "runs the warm-start (sft.steps) before GRPO, sharing each batch"
        )
    config = load_config(args.config, args.override)
    if config.sft.steps == 0:
        raise HonedError("sft.steps is 0: set it in the config or with -o sft.steps=N")
    run = resolve_run_dir(args, config)
    if run.warmstart.exists():
        if not args.overwrite:
            raise HonedError(f"{run.warmstart} exists; pass --overwrite to train it again")
        run.remove(run.warmstart)
    reporter = Reporter(enabled=not args.quiet and config.logging.progress)
    trainer = GRPOTrainer(config, run, reporter)
    run.create()
    if not run.has_steps():  # a trained run's config stays the one it was trained with
        # so that `honed eval RUN` reports the warm-start beside the baselines before any GRPO
        # step; `honed train` in the same folder replaces it and starts from the warm-start
        run.write_config(dump_config(config))
    trainer.policy = trainer.warm_start()
    results = trainer.evaluate_policy()
    atomic_write_json(
        run.claim(run.file("warmstart_eval.json")),
        {"warmstart": trainer.warmstart, "eval": results},
    )
    reporter.values(f"warm-start, {config.eval.split} split", {**trainer.warmstart, **results})
    reporter.note(f"checkpoint: {run.warmstart}")
    return 0


def _checkpoint_and_run(path: Path) -> tuple[Path, RunDir | None]:
    """The checkpoint `honed eval PATH` evaluates (a run's latest, or its warm-start, or PATH
    itself) and the run it belongs to: none for a checkpoint outside a run's checkpoints/."""
    if not path.exists():
        raise HonedError(f"no such run or checkpoint: {path}")
    run = RunDir(path)
    if run.config_path.exists():
        latest = run.latest_checkpoint()
        if latest is not None:
            return latest[1], run
        if is_checkpoint(run.warmstart):
            return run.warmstart, run
        raise HonedError(f"{path} has no checkpoint to evaluate yet")
    if is_checkpoint(path):
        parent = RunDir(path.parent.parent)
        in_run = path.parent.name == "checkpoints" and parent.config_path.is_file()
        if in_run:
            confined(parent.path, parent.path / "checkpoints" / path.name)
        return path, parent if in_run else None
    raise HonedError(f"{path} is neither a run directory nor a model checkpoint")


def _eval_config_and_out(
    args: argparse.Namespace, checkpoint: Path, run: RunDir | None, reporter: Reporter
) -> tuple[Config, Path]:
    """The config to evaluate with (--config, or the run's own when it is safe or trusted)
    and where the results go (--out, or the run's eval/ folder: never outside a run)."""
    if args.config:
        config = load_config(args.config, args.override)
    elif run is not None:
        config = load_run_config(
            Config, run.config_path, args.override, args.trust_run_config, reporter.note
        )
    else:
        raise HonedError(f"{checkpoint} is outside a run directory: pass --config")
    if args.out:
        return config, Path(args.out)
    if run is not None:
        return config, run.claim(run.file("eval", f"{checkpoint.name}_{args.split}.json"))
    raise HonedError(f"{checkpoint} is outside a run directory: pass --out FILE for the result")


def _use_threads(config: Config) -> None:
    """The run's `torch_threads`, as training used: another count makes some CPU kernels sum in
    another order, and greedy answers can change."""
    if config.torch_threads:
        import torch

        torch.set_num_threads(config.torch_threads)


def cmd_eval(args: argparse.Namespace) -> int:
    from honed.envs.base import Reporting
    from honed.models.policy import Policy, SamplingParams
    from honed.rl.evaluate import MemoSampler, env_reports, evaluate
    from honed.rl.trainer import build_envs
    from honed.types import derive_seed

    checkpoint, run = _checkpoint_and_run(Path(args.path))
    reporter = Reporter(enabled=not args.quiet)
    config, out = _eval_config_and_out(args, checkpoint, run, reporter)
    _use_threads(config)
    envs = build_envs(config)
    check_tree(checkpoint)
    policy = Policy.from_checkpoint(checkpoint, config.policy, config.seed)
    num_items = args.num_items or config.eval.num_items
    params = SamplingParams(
        config.eval.temperature, config.trainer.top_p, config.trainer.max_completion_length
    )
    sampler = MemoSampler(policy, params)  # the report's rollout of this policy replays it
    with reporter.status(f"evaluating {checkpoint} on {args.split}"):
        results = evaluate(
            policy,
            envs,
            split=args.split,
            num_items=num_items,
            seed=derive_seed(config.seed, "eval"),
            sampler=sampler,
            samples=config.eval.samples,
        )
    tables = {}
    if any(isinstance(env, Reporting) for env in envs.values()):
        with reporter.status("environment reports (baselines and agents)"):
            agents = _report_agents(run, checkpoint, sampler, config)
            tables = env_reports(
                agents, envs, args.split, num_items, params, derive_seed(config.seed, "eval")
            )
    reports = {name: table.to_dict() for name, table in tables.items()}
    atomic_write_json(
        out, {"checkpoint": str(checkpoint), "split": args.split, **results, "reports": reports}
    )
    reporter.values(f"{checkpoint} — {args.split}", results)
    for name, table in tables.items():
        reporter.table(f"{name}: {table.title}, {args.split} split", table.columns, table.rows)
    if reports and args.out is None and run is not None and run.summary_path.exists():
        summary = run.read_summary()
        summary.setdefault("reports", {})[args.split] = {"checkpoint": str(checkpoint), **reports}
        run.write_summary(summary)
        reporter.note(f"reports added to {run.summary_path} under reports.{args.split}")
    reporter.note(f"written to {out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from honed.models.sources import is_adapter_dir

    path, out = Path(args.path), Path(args.out)
    if is_checkpoint(path):
        checkpoint = path
    elif RunDir(path).latest_checkpoint() is not None:
        checkpoint = RunDir(path).latest_checkpoint()[1]
    else:
        raise HonedError(f"{path} is neither a model checkpoint nor a run with a checkpoint")
    if out.exists() and not args.overwrite:
        raise HonedError(f"{out} exists; pass --overwrite to replace it")
    check_tree(checkpoint)  # a link inside would be copied, content and all, into the export
    if is_adapter_dir(checkpoint):
        _export_merged(checkpoint, out)
        print(f"exported {checkpoint} to {out}, its LoRA adapter merged into the base model")
        return 0
    files = [f for f in sorted(checkpoint.iterdir()) if f.is_file() and f.name != STATE_FILE]

    def write(folder: Path) -> None:
        for f in files:
            copy_file(f, folder / f.name)

    atomic_write_dir(out, write)
    print(f"exported {checkpoint} to {out} ({len(files)} files)")
    return 0


def _export_merged(checkpoint: Path, out: Path) -> None:
    """A LoRA checkpoint as a plain Hugging Face model: the run's base model (its config's
    `policy` section; the only part read, so nothing in it runs code) with the adapter folded
    into the weights, in float32 on the CPU so that merging rounds nothing."""
    from pydantic import ValidationError

    from honed.config import PolicyConfig
    from honed.models.lora import merged
    from honed.models.policy import Policy

    run = RunDir(checkpoint.parent.parent)
    if checkpoint.parent.name != "checkpoints" or not run.config_path.is_file():
        raise HonedError(
            f"{checkpoint} holds a LoRA adapter outside a run directory: its base model is "
            "named in the run's config.yaml; export from the run instead"
        )
    data = load_yaml(read_text(run.config_path), str(run.config_path)) or {}
    try:
        settings = PolicyConfig.model_validate(data.get("policy") or {})
    except ValidationError as exc:
        raise HonedError(f"{run.config_path}: invalid policy section: {exc}") from exc
    settings = settings.model_copy(update={"device": "cpu", "dtype": "float32"})
    policy = Policy.from_checkpoint(checkpoint, settings, int(data.get("seed", 0)))
    policy.model = merged(policy.model)
    atomic_write_dir(out, policy.save)


def _report_agents(
    run: RunDir | None, checkpoint: Path, sampler: PolicySampler, config: Config
) -> dict:
    """The agents an environment report compares: the run's warm-start (a policy) and the
    evaluated one (`sampler`, which has rolled it out for the metrics already)."""
    from honed.models.policy import Policy

    agents: dict[str, Policy | PolicySampler] = {}
    if run is None:
        return {checkpoint.name: sampler}
    if is_checkpoint(run.warmstart) and checkpoint != run.warmstart:
        check_tree(run.warmstart)
        agents["warm-start agent"] = Policy.from_checkpoint(
            run.warmstart, config.policy, config.seed
        )
    if checkpoint == run.warmstart:
        agents["warm-start agent"] = sampler
    elif checkpoint.name.startswith("step_"):
        agents[f"GRPO agent ({checkpoint.name})"] = sampler
    else:
        agents[checkpoint.name] = sampler
    return agents


def cmd_skills_train(args: argparse.Namespace) -> int:
    from honed.skills.config import load_skills_config
    from honed.skills.rundir import SkillRunDir
    from honed.skills.trainer import SkillTrainer

    config = load_skills_config(args.config, args.override)
    run = resolve_run_dir(args, config, SkillRunDir)
    if args.dry_run:
        return skills_dry_run(config, run)
    if run.holds_run() and not (args.resume or args.overwrite):
        raise HonedError(
            f"{run.path} already holds a skills run; pass --resume to continue it, --overwrite "
            "to replace it, or --run-dir to start another"
        )
    reporter = Reporter(enabled=not args.quiet and config.logging.progress)
    trainer = SkillTrainer(config, run, reporter)
    try:
        with reporter.status("checking the target and reflector servers"):
            trainer.preflight()
        if args.overwrite:
            run.clear()  # what honed wrote there; nothing else
        reporter.note(f"run directory: {run.describe()}")
        summary = trainer.train(resume=args.resume)
    finally:
        trainer.close()
    report_skills_run(reporter, config, run, summary)
    return 0


def report_skills_run(
    reporter: Reporter, config: SkillsConfig, run: SkillRunDir, summary: dict
) -> None:
    """The tables and lines a finished (or stopped) skills run ends with."""
    initial, best = (
        {k: summary["selection"][which][k] for k in ("hard", "soft")}
        for which in ("initial", "best")
    )
    reporter.comparison(
        f"selection score ({config.gate.split} split)", initial, best, labels=("initial", "best")
    )
    if summary.get("eval"):
        reporter.comparison(
            f"held-out {config.eval.split} evaluation",
            summary["eval"]["initial"],
            summary["eval"]["best"],
            labels=("initial", "best"),
        )
    counters = ("requests", "retries", "truncated", "empty", "invalid", "failed")
    reporter.table(
        "calls and tokens per stage",
        ["stage", *counters, "prompt tokens", "completion tokens"],
        [
            [
                stage,
                *(int(row.get(k, 0)) for k in (*counters, "prompt_tokens", "completion_tokens")),
            ]
            for stage, row in summary["tokens"].items()
        ],
    )
    reporter.note(
        f"{summary['steps']} steps: {len(summary['accepted_steps'])} accepted, "
        f"{len(summary['rejected_steps'])} rejected, {len(summary['unchanged_steps'])} unchanged"
        + (f", {len(summary['skipped_steps'])} skipped" if summary.get("skipped_steps") else "")
    )
    usd = [row["usd"] for row in summary["tokens"].values() if "usd" in row]
    if usd:
        reporter.note(f"cost: {sum(usd):.4f} USD")
    if summary.get("stopped"):
        reporter.note(f"stopped early: {summary['stopped']['reason']}")
    if summary.get("eval_skipped"):
        reporter.note(f"no held-out evaluation: {summary['eval_skipped']}")
    reporter.note(f"best skill: {run.best_path} (version {summary['best_version']})")
    reporter.note(f"summary: {run.summary_path}")


def skills_dry_run(config: SkillsConfig, run: SkillRunDir) -> int:
    """`honed skills train --dry-run`: the config is valid (it loaded), both servers answer,
    and what the run will cost at most; nothing is written."""
    from honed.skills.cost import ESTIMATE_HEADER, estimate_report
    from honed.skills.trainer import SkillTrainer

    reporter = Reporter()
    trainer = SkillTrainer(config, run, reporter)
    try:
        with reporter.status("checking the target and reflector servers"):
            trainer.preflight()
        for role in ("target", "reflector"):
            model = getattr(config, role)
            reporter.note(f"{role}: {model.base_url} serves {model.model}")
        rows, notes = estimate_report(config, trainer.estimate())
    finally:
        trainer.close()
    epochs = -(-trainer.total_steps // trainer.steps_per_epoch)
    reporter.note(
        f"{trainer.total_steps} steps ({epochs} epoch(s) of {trainer.steps_per_epoch}), "
        f"{config.train.batch_size} items per step, {len(trainer.gate_items)} selection items"
    )
    reporter.table("what the run will spend", ESTIMATE_HEADER, rows)
    for note in notes:
        reporter.note(note)
    reporter.note(f"dry run: nothing was written; the run would go to {run.path}")
    return 0


def cmd_skills_eval(args: argparse.Namespace) -> int:
    from honed.skills.config import SkillsConfig, load_skills_config
    from honed.skills.document import SkillDocument
    from honed.skills.rollout import RolloutCache
    from honed.skills.rundir import SkillRunDir
    from honed.skills.trainer import evaluate_skill

    run = SkillRunDir(args.run_dir) if args.run_dir else None
    reporter = Reporter(enabled=not args.quiet)
    if args.config:
        config = load_skills_config(args.config, args.override)
    elif run is None:
        raise HonedError("give a skills CONFIG or --run-dir (whose config.yaml is used)")
    elif not run.config_path.is_file():
        raise HonedError(f"{run.path} holds no skills run (no {run.config_path.name})")
    else:
        config = load_run_config(
            SkillsConfig, run.config_path, args.override, args.trust_run_config, reporter.note
        )
    skill = SkillDocument.load(run_file_argument(args.skill))
    cache = RolloutCache(run.claim(run.cache_path) if run is not None else None)
    num_items = args.num_items or config.eval.num_items
    results = evaluate_skill(config, skill, args.split, num_items, cache, reporter)
    if run is not None:
        out = run.claim(run.file("eval", f"{Path(args.skill).stem}_{args.split}.json"))
        atomic_write_json(out, {"skill": str(args.skill), "split": args.split, **results})
        reporter.note(f"written to {out}")
    reporter.values(f"{args.skill} — {args.split}", results)
    return 0


def show_config(args: argparse.Namespace, model: type[BaseModel]) -> int:
    """`honed config` / `honed skills config`: the resolved config with each key's help
    (`honed.config_reference.annotated_yaml`), or with `--schema` the JSON schema, whose
    descriptions are the same."""
    from honed.config_reference import annotated_yaml

    if args.schema:
        if args.config or args.override:
            raise HonedError("--schema describes every config: give it no CONFIG and no -o")
        print(json.dumps(model.model_json_schema(), indent=2, ensure_ascii=False))
        return 0
    print(annotated_yaml(load_model(model, args.config, args.override)), end="")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    return show_config(args, Config)


def cmd_skills_config(args: argparse.Namespace) -> int:
    from honed.skills.config import SkillsConfig

    if args.config is None and not args.schema:
        raise HonedError(
            "give a skills CONFIG (envs, target and reflector have no defaults), or --schema"
        )
    return show_config(args, SkillsConfig)


def cmd_skills(args: argparse.Namespace) -> int:
    commands = {"train": cmd_skills_train, "eval": cmd_skills_eval, "config": cmd_skills_config}
    return commands[args.skills_command](args)


def cmd_view(args: argparse.Namespace) -> int:
    from honed.view import serve

    serve(args.root, args.host, args.port)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from honed.serve import ServeOptions, serve

    fields = ServeOptions.__dataclass_fields__
    serve(args.source, ServeOptions(**{k: v for k, v in vars(args).items() if k in fields}))
    return 0


COMMANDS = {
    "train": cmd_train,
    "sft": cmd_sft,
    "eval": cmd_eval,
    "export": cmd_export,
    "skills": cmd_skills,
    "view": cmd_view,
    "serve": cmd_serve,
    "config": cmd_config,
}


def _show_deprecation(message, category, filename, lineno, file=None, line=None) -> None:
    """honed's own deprecations in one line; every other warning as Python shows it."""
    if issubclass(category, HonedDeprecationWarning):
        print(f"honed: deprecated: {message}", file=sys.stderr)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    warnings.showwarning = _show_deprecation
    try:
        return COMMANDS[args.command](args)
    except HonedError as err:
        if args.debug:
            traceback.print_exc()
        print(f"honed: error: {one_line(redact(str(err)))}", file=sys.stderr)
        return EXIT_USAGE
    except RunInterrupted as stop:
        if os.environ.get("RANK", "0") == "0":  # the process that saved says it, once
            print(f"honed: {interruption(stop)}", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print("honed: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from honed.distributed.launch import report_lost_peers

            report_lost_peers(exc)  # returns only if this process is where the error began
        raise


def interruption(stop: RunInterrupted) -> str:
    """What a Ctrl-C or SIGTERM left behind, and how to go on."""
    if stop.path is None:
        return f"interrupted after step {stop.step}; nothing was saved"
    if stop.finished:
        return f"interrupted after step {stop.step}; saved {stop.path}; continue with --resume"
    return f"interrupted during step {stop.step + 1}, unsaved; --resume continues from {stop.path}"


if __name__ == "__main__":
    sys.exit(main())
