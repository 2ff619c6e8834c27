"""Metric sinks: JSONL always; TensorBoard, Weights & Biases (offline) and MLflow when enabled.

Optional trackers are imported only when switched on, and a missing package is a clear error at
start-up rather than a crash at the first log call.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Protocol

from honed.config import LoggingConfig
from honed.errors import HonedError
from honed.runs.rundir import RunDir


class Tracked(Protocol):
    """A run's config as the sinks read it: GRPO's `Config` and the skill loop's
    `SkillsConfig` both have a seed and a `logging` section."""

    seed: int
    logging: LoggingConfig

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


class Sink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


class JsonlSink:
    """`metrics.jsonl`: one object per log call, with the step and the wall-clock `time` (Unix
    seconds) it was logged at, the axis `honed view` plots wall time on."""

    def __init__(self, run: RunDir) -> None:
        self.run = run

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.append(
            self.run.metrics_path, {"step": step, "time": round(time.time(), 3), **metrics}
        )

    def close(self) -> None:
        pass


class TensorBoardSink:
    def __init__(self, run: RunDir) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise HonedError(
                "logging.tensorboard is on but TensorBoard is not installed: "
                "pip install 'honed[tracking]'"
            ) from exc
        self.writer = SummaryWriter(log_dir=str(run.claim(run.file("tensorboard"), tree=True)))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in _finite(metrics).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Offline by default (`WANDB_MODE=online` to stream): runs sync later with `wandb sync`."""

    def __init__(self, run: RunDir, config: Tracked) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise HonedError(
                "logging.wandb is on but wandb is not installed: pip install 'honed[tracking]'"
            ) from exc
        self.wandb = wandb
        run.claim(run.file("wandb"), tree=True)  # where wandb writes, given `dir`
        self.run = wandb.init(
            project=config.logging.wandb_project,
            dir=str(run.path),
            mode=os.environ.get("WANDB_MODE", "offline"),
            config=config.model_dump(mode="json"),
            name=run.path.name,
            resume="allow",
        )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(_finite(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    def __init__(self, run: RunDir, config: Tracked) -> None:
        try:
            import mlflow
        except ImportError as exc:
            raise HonedError(
                "logging.mlflow is on but mlflow is not installed: pip install 'honed[tracking]'"
            ) from exc
        self.mlflow = mlflow
        if "MLFLOW_TRACKING_URI" not in os.environ:
            # Offline by default, like W&B: a file store inside the run directory (MLflow asks
            # for an explicit opt-in to its file store). MLFLOW_TRACKING_URI picks a server.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri(run.claim(run.file("mlruns"), tree=True).resolve().as_uri())
        mlflow.start_run(run_name=run.path.name)
        params: dict[str, Any] = {"seed": config.seed}
        for section in ("policy", "target"):  # the model GRPO trains, or the skill loop's
            model = getattr(getattr(config, section, None), "model", None)
            if model is not None:
                params[section] = model
        mlflow.log_params(params)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k.replace("/", "."): v for k, v in _finite(metrics).items()}
        self.mlflow.log_metrics(clean, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


class Sinks:
    """Fan-out to every enabled sink."""

    def __init__(self, run: RunDir, config: Tracked) -> None:
        self.sinks: list[Sink] = [JsonlSink(run)]
        if config.logging.tensorboard:
            self.sinks.append(TensorBoardSink(run))
        if config.logging.wandb:
            self.sinks.append(WandbSink(run, config))
        if config.logging.mlflow:
            self.sinks.append(MlflowSink(run, config))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, metrics)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


class NoSinks(Sinks):
    """Where a learner process other than rank 0 logs: nowhere (rank 0 logs the step)."""

    def __init__(self) -> None:
        self.sinks = []
