"""Metric sinks write what they are given, where a person will look for it."""

from __future__ import annotations

import pytest

from honed.config import Config
from honed.errors import HonedError
from honed.runs.rundir import RunDir
from honed.runs.sinks import Sinks


def _config(**logging) -> Config:
    return Config.model_validate({"logging": logging})


def test_jsonl_is_always_on(tmp_path):
    run = RunDir(tmp_path)
    sinks = Sinks(run, _config())
    sinks.log(1, {"reward/mean": 0.5, "note": "not a number", "nan": float("nan")})
    sinks.close()
    rows = run.read_jsonl(run.metrics_path)
    assert rows[0]["step"] == 1 and rows[0]["reward/mean"] == 0.5


def test_tensorboard_writes_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sinks = Sinks(RunDir(tmp_path), _config(tensorboard=True))
    sinks.log(1, {"reward/mean": 0.25, "nan": float("nan")})
    sinks.log(2, {"reward/mean": 0.75})
    sinks.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("reward/mean")] == [0.25, 0.75]
    assert "nan" not in acc.Tags()["scalars"]


def test_wandb_runs_offline_into_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    sinks = Sinks(RunDir(tmp_path), _config(wandb=True, wandb_project="honed-test"))
    sinks.log(1, {"reward/mean": 0.5})
    sinks.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))


def test_mlflow_logs_to_a_store_in_the_run_directory(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    sinks = Sinks(RunDir(tmp_path), _config(mlflow=True))
    sinks.log(3, {"reward/mean": 0.5})
    run_id = mlflow.active_run().info.run_id
    sinks.close()
    history = mlflow.MlflowClient().get_metric_history(run_id, "reward.mean")
    assert [(m.step, m.value) for m in history] == [(3, 0.5)]
    assert (tmp_path / "mlruns").is_dir()


def test_a_missing_tracker_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(HonedError, match=r"pip install 'honed\[tracking\]'"):
        Sinks(RunDir(tmp_path), _config(wandb=True))
