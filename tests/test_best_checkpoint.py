"""`checkpoint.keep_best`: the checkpoint of the best evaluation so far stays as
`checkpoints/best` whatever `keep_last` prunes, survives a resume, and names its step."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file
from test_resume import _interrupt_after
from tiny_run import small_config, spread_env_data

from honed.cli import main
from honed.errors import HonedError
from honed.rl.trainer import STATE_FILE, GRPOTrainer
from honed.runs.rundir import RunDir
from honed.runs.state import load_state

# `reward` moves between sampled evaluations of the tiny policy (its accuracy mostly stays 0)
# once the learning rate moves its weights (here the best of steps 1-4 is step 1)
BEST = (
    "checkpoint.keep_best=reward",
    "eval.every=1",
    "eval.temperature=1.0",
    "trainer.learning_rate=3e-2",
    "trainer.max_steps=4",
)


def _evals(run: RunDir) -> dict[int, float]:
    return {
        r["step"]: r["eval/reward"] for r in run.read_jsonl(run.metrics_path) if "eval/reward" in r
    }


def _weights(folder) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def every_step(tmp_path_factory):
    """The same run with every step's checkpoint kept: the weights each step ended with."""
    tmp = tmp_path_factory.mktemp("every")
    data = spread_env_data(tmp)
    config = small_config(tmp, *BEST, "checkpoint.every=1", "checkpoint.keep_last=10", data=data)
    run = RunDir(tmp / "run")
    GRPOTrainer(config, run).train()
    return run


def test_the_best_evaluation_s_checkpoint_outlives_pruning(tmp_path, every_step):
    data = spread_env_data(tmp_path)
    config = small_config(
        tmp_path, *BEST, "checkpoint.every=0", "checkpoint.keep_last=1", data=data
    )
    run = RunDir(tmp_path / "run")
    summary = GRPOTrainer(config, run).train()
    evals = _evals(run)
    assert evals == _evals(every_step)
    trained = {step: value for step, value in evals.items() if step >= 1}
    best_step = max(trained, key=lambda s: (trained[s], -s))  # the first of equal values
    assert len(set(trained.values())) > 1, "the test needs evaluations that differ"
    assert best_step != 4, "the test needs a best step that the last one does not repeat"
    kept = json.loads((run.checkpoints / "best" / "best.json").read_text())
    assert kept == {"step": best_step, "metric": "reward", "value": trained[best_step]}
    assert summary["best_checkpoint"] == {"path": str(run.checkpoints / "best"), **kept}
    assert load_state(run.checkpoints / "best" / STATE_FILE)["step"] == best_step
    # pruned away from `step_N` (keep_last 1), whole under `best`
    assert [p.name for p in run.checkpoints.iterdir() if p.name.startswith("step_")] == ["step_4"]
    best, expected = (
        _weights(run.checkpoints / "best"),
        _weights(every_step.checkpoints / f"step_{best_step}"),
    )
    assert best.keys() == expected.keys()
    assert all(torch.equal(best[k], expected[k]) for k in best)


def test_a_resumed_run_keeps_the_best_of_the_whole_run(tmp_path, every_step):
    """Interrupted after step 3 and resumed: the best so far comes back from `best.json`, so
    a later, lower evaluation does not replace it."""
    data = spread_env_data(tmp_path)
    config = small_config(tmp_path, *BEST, "checkpoint.every=0", data=data)
    _interrupt_after(GRPOTrainer(config, RunDir(tmp_path / "run")), 3)
    again = GRPOTrainer(config, RunDir(tmp_path / "run"))
    again.train(resume=True)
    best = json.loads((again.run.checkpoints / "best" / "best.json").read_text())
    assert best == json.loads((every_step.checkpoints / "best" / "best.json").read_text())


def test_without_periodic_evaluations_the_final_one_picks_the_best(tmp_path):
    config = small_config(tmp_path, "checkpoint.keep_best=reward", "trainer.max_steps=2")
    run = RunDir(tmp_path / "run")
    summary = GRPOTrainer(config, run).train()
    assert summary["best_checkpoint"]["step"] == 2
    # the best files are the step's, not copies, where the file system has hard links
    model = "model.safetensors"
    best, step = run.checkpoints / "best" / model, run.checkpoints / "step_2" / model
    assert os.path.samefile(best, step) or best.read_bytes() == step.read_bytes()
    # and `honed eval` takes it as any checkpoint of the run
    out = tmp_path / "best_eval.json"
    assert main(["eval", str(run.checkpoints / "best"), "--quiet", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["checkpoint"] == str(run.checkpoints / "best")


def test_a_metric_the_evaluation_does_not_give_is_refused_before_the_first_step(tmp_path):
    config = small_config(tmp_path, "checkpoint.keep_best=acuracy")
    run = RunDir(tmp_path / "run")
    with pytest.raises(HonedError, match=r"checkpoint\.keep_best: .*'acuracy'.* accuracy"):
        GRPOTrainer(config, run).train()
    assert [r["step"] for r in run.read_jsonl(run.metrics_path)] == [0]


def test_the_best_checkpoint_shares_files_but_never_follows_a_link(tmp_path):
    """`link_tree`: files as hard links, folders made anew; a link inside the checkpoint is
    refused (it would take what it points to into `best`), naming it."""
    from honed.runs.files import link_tree

    source = tmp_path / "step_1"
    (source / "sub").mkdir(parents=True)
    (source / "model.safetensors").write_bytes(b"weights")
    (source / "sub" / "state.pt").write_bytes(b"state")
    target = tmp_path / "best"
    target.mkdir()
    link_tree(source, target)
    assert (target / "sub" / "state.pt").read_bytes() == b"state"
    assert os.path.samefile(target / "model.safetensors", source / "model.safetensors")
    (source / "sub" / "outside").symlink_to(tmp_path / "elsewhere")
    again = tmp_path / "again"
    again.mkdir()
    with pytest.raises(HonedError, match=r"outside is a symbolic link"):
        link_tree(source, again)
