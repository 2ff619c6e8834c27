"""The multi-process learner on the CPU (gloo), `ddp` and `fsdp`: `honed train --nproc 2` ends
where one process ends (same items, same completions, the same update within float rounding),
and its checkpoints resume on one process and on two, in either mode.

Each mode trains once on two processes (2 steps, a checkpoint after each); the other tests
resume copies of that run, so the whole module starts five two-process runs and two short
one-process ones."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from numerics import ADAM_WEIGHTS_RTOL, assert_weights_close
from safetensors.torch import load_file
from tiny_run import small_config_data, spread_env_data, write_config

from honed.cli import main

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


@pytest.fixture(autouse=True, scope="module")
def _children_find_honed_and_the_test_envs():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(
            "PYTHONPATH", os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])
        )
        mp.setenv("OMP_NUM_THREADS", "1")
        yield


def _config(tmp_path, name: str, steps: int, parallel: str = "ddp") -> Path:
    data = spread_env_data(tmp_path)
    data["run_dir"] = str(tmp_path / name)
    data["torch_threads"] = 1
    # 3 groups of 4: one process trains 2 (3 micro-batches), the other 1 (2 micro-batches); a
    # KL term to a reference model (fsdp shards it too) and layers recomputed in the backward
    data["trainer"].update(
        max_steps=steps,
        prompts_per_step=3,
        micro_batch_size=3,
        parallel=parallel,
        beta=0.1,
        kl_estimator="k3",
    )
    data["policy"]["gradient_checkpointing"] = True
    data["checkpoint"] = {"every": 1, "keep_last": 5}
    data["eval"]["num_items"] = 4
    return write_config(tmp_path, data, f"{name}.yaml")


def _train(config: Path, *more: str) -> None:
    assert main(["train", str(config), "--quiet", *more]) == 0


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step_{step}" / "model.safetensors"))


def _metrics(run: Path) -> list[dict]:
    rows = [yaml.safe_load(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]


def _samples(run: Path, step: int) -> list[tuple]:
    rows = [yaml.safe_load(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    return [(r["item"], r["completion"], r["reward"]) for r in rows if r["step"] == step]


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("single")
    _train(_config(tmp, "run", 3))
    return tmp / "run"


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def two(request, tmp_path_factory) -> tuple[str, Path]:
    """A two-process run of 2 steps in each mode, checkpointed after each step."""
    tmp = tmp_path_factory.mktemp(request.param)
    _train(_config(tmp, "run", 2, request.param), "--nproc", "2")
    return request.param, tmp / "run"


def test_two_processes_end_where_one_does(two, single):
    parallel, run = two
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["learner_processes"], summary["sharded"]) == (2, parallel == "fsdp")
    # the first step: the same weights sampled, so the same items and completions exactly
    assert _samples(run, 1) == _samples(single, 1) != []
    # the update: gradients summed over two processes of whole groups (ddp: by an all-reduce
    # of the whole gradient; fsdp: by reduce-scatters of each layer's) against one process's
    # micro-batches: the same sums in another order, so equal but for float rounding
    # (numerics.py: ~1e-7 relative, where a lost or doubled share of the batch is ~1e-1)
    for step in (1, 2):
        assert_weights_close(_weights(run, step), _weights(single, step))
    # AdamW hides a gradient scaled by 1/N (an average where the sum is due); the norm does not
    mine, one = _metrics(run), _metrics(single)[:2]
    assert [r["step"] for r in mine] == [1, 2]
    for a, b in zip(mine, one, strict=True):
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)
        assert a["tokens/trained"] == b["tokens/trained"]
    assert not list((run / "checkpoints").glob("*.tmp"))


@pytest.mark.parametrize("then", [1, 2])
def test_a_two_process_checkpoint_resumes_on_one_process_and_on_two(tmp_path, two, single, then):
    """On one process, in the run's mode; on two, in the other mode (ddp's checkpoint sharded,
    fsdp's replicated): the optimizer state is kept by parameter name, whole, in both modes.
    (fsdp on two resumes fsdp on two in the Ctrl-C test below.)"""
    parallel, run = two
    if then == 2:
        parallel = {"ddp": "fsdp", "fsdp": "ddp"}[parallel]
    shutil.copytree(run, tmp_path / "run")
    _train(_config(tmp_path, "run", 3, parallel), "--resume", "--nproc", str(then))
    assert_weights_close(_weights(tmp_path / "run", 3), _weights(single, 3))


def test_fsdp_with_lora_ends_where_one_process_does(tmp_path):
    """LoRA: frozen base and trained adapters in one FSDP unit; the reference is the same
    sharded model with its adapters off; two iterations reuse the cached pi_old."""
    runs = {}
    for name, parallel, more in [("one", "ddp", ()), ("two", "fsdp", ("--nproc", "2"))]:
        data = yaml.safe_load(_config(tmp_path, name, 1, parallel).read_text())
        data["policy"]["lora"] = {"r": 4, "alpha": 8}
        data["trainer"]["num_iterations"] = 2
        _train(write_config(tmp_path, data, f"{name}.yaml"), *more)
        runs[name] = tmp_path / name / "checkpoints" / "step_1" / "adapter_model.safetensors"
    two, one = (load_file(str(runs[n])) for n in ("two", "one"))
    assert_weights_close(two, one)
    # B starts at zero: the adapters did train
    assert any(float(t.abs().max()) > 0 for k, t in one.items() if "lora_B" in k)


def _launch(config: Path, fault: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`honed train CONFIG --nproc 2` as a user starts it, with `HONED_TEST_FAULT` set
    (tiny_run.FaultyDigitShareEnv)."""
    command = [sys.executable, "-m", "honed", "train", str(config), "--nproc", "2", "--quiet"]
    env = {**os.environ, "HONED_TEST_FAULT": fault, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def _faulty_config(tmp_path, parallel: str, every: int) -> Path:
    config = _config(tmp_path, "run", 3, parallel)
    data = yaml.safe_load(config.read_text())
    data["envs"][0]["type"] = "tiny_run:FaultyDigitShareEnv"
    data["checkpoint"]["every"] = every
    return write_config(tmp_path, data, "run.yaml")


def _stopped_after_step_2(done: subprocess.CompletedProcess, run: Path, code: int) -> Path:
    """The launcher exited with `code`, said once that step 2 was saved, and saved only it."""
    assert done.returncode == code, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("honed:")]
    assert lines == [
        f"honed: interrupted after step 2; saved {run / 'checkpoints' / 'step_2'}; "
        "continue with --resume"
    ], done.stderr
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_2"]
    return run


def test_ctrl_c_stops_every_process_after_the_same_step_with_a_checkpoint(tmp_path, single):
    """A real SIGINT to the launcher, sent during step 2 (rank 0's 9th training reward, its
    first of step 2): both processes finish step 2, agree to stop, save it once (fsdp: both
    take part in gathering it) and exit; the run resumes and ends where one process does."""
    config = _faulty_config(tmp_path, "fsdp", every=0)  # only the interruption saves
    run = _stopped_after_step_2(_launch(config, "sigint:0:9"), tmp_path / "run", 130)
    assert [r["step"] for r in _metrics(run)] == [1, 2]
    _train(config, "--resume", "--nproc", "2")
    assert_weights_close(_weights(run, 3), _weights(single, 3))


def test_one_process_failing_stops_all_with_one_message_and_loses_nothing(tmp_path, single):
    """Process 1's environment raises in step 2 while process 0 waits for its groups: the
    launcher names the process that failed (its own error above it), stops the other
    without a second report, and exits with its code; step 1's checkpoint resumes."""
    config = _faulty_config(tmp_path, "ddp", every=1)
    done = _launch(config, "raise:1:5")
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("ValueError: the test environment failed on call 5") == 1
    lines = [line for line in done.stderr.splitlines() if line.startswith("honed:")]
    assert lines == ["honed: learner process 1 exited with code 1; stopped the others"]
    assert "Traceback" in done.stderr and done.stderr.count("Traceback") == 1, done.stderr
    run = tmp_path / "run"
    assert [r["step"] for r in _metrics(run)] == [1]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_1"]
    _train(config, "--resume")
    assert_weights_close(_weights(run, 3), _weights(single, 3))


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="lists processes in /proc")
def test_sigterm_to_the_launcher_stops_every_process_after_the_same_step_with_a_checkpoint(
    tmp_path, single
):
    """A real SIGTERM to the launcher during step 2 (as `kill` or a job scheduler preempting
    the job sends): the learner processes, each in a session of its own, are not left
    behind; as after a Ctrl-C, both finish step 2 and save it, the launcher exits with 143,
    and the run resumes to end where one process does."""
    config = _faulty_config(tmp_path, "ddp", every=0)  # only the interruption saves
    run = _stopped_after_step_2(_launch(config, "sigterm:0:9"), tmp_path / "run", 143)
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(config).encode() in cmdline.read_bytes():
                left.append(cmdline.parent.name)
        except OSError:  # a process that ended meanwhile
            pass
    assert not left, f"learner processes still running: {left}"
    _train(config, "--resume", "--nproc", "2")
    assert_weights_close(_weights(run, 3), _weights(single, 3))


def test_a_learner_process_leaves_without_the_interpreter_s_finalization(tmp_path):
    """`python -m honed` in one of several learner processes (WORLD_SIZE above 1) runs the
    atexit handlers and leaves without the interpreter's finalization, keeping its exit code
    and its output: gloo's worker threads outlive the process group and may still let go of a
    collective's tensors then, which aborts the process ("terminate called without an active
    exception": `run_learner`). An object deleted with its module's globals, which happens in
    the finalization only, tells whether there was one."""
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, pathlib\n"
        f"here = pathlib.Path({str(tmp_path)!r})\n"
        "atexit.register((here / 'atexit_ran').write_text, 'yes')\n"
        "class Finalized:\n"
        "    def __init__(self):\n"
        "        self.mark = (here / 'finalized').write_text\n"
        "    def __del__(self):\n"
        "        self.mark('yes')\n"
        "finalized = Finalized()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)])}
    for world, finalized in (("2", False), ("1", True)):
        for argv, code, said in ((["--version"], 0, "honed"), (["train", "none.yaml"], 2, "")):
            done = subprocess.run(
                [sys.executable, "-m", "honed", *argv],
                env={**env, "WORLD_SIZE": world},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == code, done.stderr
            assert said in done.stdout and ("honed: error:" in done.stderr) == (code == 2)
            marks = {p.name for p in tmp_path.iterdir()} & {"atexit_ran", "finalized"}
            assert marks == ({"atexit_ran", "finalized"} if finalized else {"atexit_ran"})
            for mark in marks:
                (tmp_path / mark).unlink()


def test_optimizer_state_is_kept_by_name_and_older_index_keyed_states_still_load(small_policy):
    """What a checkpoint holds (`optimizer_state`) and loading it back, without processes: a
    plain optimizer takes it, and the index-keyed `Optimizer.state_dict()` of checkpoints
    written before loads as well; a name the model lacks is one clear error."""
    from honed.distributed.fsdp import load_optimizer_state, optimizer_state
    from honed.errors import HonedError

    model = small_policy.model
    params = [p for p in model.parameters() if p.requires_grad]

    def fresh() -> torch.optim.AdamW:
        return torch.optim.AdamW(params, lr=1e-3)

    trained = fresh()
    sum(p.square().sum() for p in params).backward()
    trained.step()
    named = optimizer_state(model, trained)
    assert "model.embed_tokens.weight" in named["state"]
    assert named["param_groups"][0]["params"][0] == "model.embed_tokens.weight"
    for state in (named, trained.state_dict()):
        loaded = fresh()
        load_optimizer_state(model, loaded, state)
        for a, b in zip(
            loaded.state_dict()["state"].values(),
            trained.state_dict()["state"].values(),
            strict=True,
        ):
            assert all(torch.equal(a[k], b[k]) for k in ("exp_avg", "exp_avg_sq", "step"))
    wrong = {**named, "state": {"no.such.weight": next(iter(named["state"].values()))}}
    with pytest.raises(HonedError, match=r"no\.such\.weight"):
        load_optimizer_state(model, fresh(), wrong)


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_a_warm_start_on_two_processes_is_the_one_of_one_process(tmp_path, parallel):
    """`sft.steps` under `--nproc 2`: each process trains on its share of every batch (here 3
    and 2 of 5 examples; with fsdp, its shards), the loss normalised by the whole batch's
    weight and the gradients summed, so the warm-start and the GRPO step after it are one
    process's, but for float rounding (numerics.py), and so are the checks (rank 0's decide)."""

    def config(name: str, mode: str) -> Path:
        data = small_config_data(tmp_path)  # addition: reference answers to imitate
        data["run_dir"] = str(tmp_path / name)
        data["torch_threads"] = 1
        data["trainer"].update(max_steps=1, prompts_per_step=2, parallel=mode)
        data["sft"] = {
            "steps": 4,
            "batch_size": 5,
            "learning_rate": 1e-2,
            "prompt_loss_weight": 0.2,
            "check": {"every": 2, "examples": 8, "metric": "token_accuracy"},
        }
        return write_config(tmp_path, data, f"{name}.yaml")

    _train(config("one", "ddp"))
    _train(config("two", parallel), "--nproc", "2")
    one, two = tmp_path / "one" / "checkpoints", tmp_path / "two" / "checkpoints"
    for name in ("warmstart", "step_1"):
        a, b = (load_file(str(c / name / "model.safetensors")) for c in (two, one))
        assert_weights_close(a, b, ADAM_WEIGHTS_RTOL)  # lr 1e-2: numerics.py says why
    logs = [
        [yaml.safe_load(x) for x in (tmp_path / n / "warmstart.jsonl").read_text().splitlines()]
        for n in ("two", "one")
    ]
    assert [r["step"] for r in logs[0]] == [r["step"] for r in logs[1]]
    assert sum("check/token_accuracy" in r for r in logs[0]) == 2  # at steps 2 and 4
    for a, b in zip(*logs, strict=True):
        for key in set(a) | set(b):
            assert a[key] == pytest.approx(b[key], rel=1e-5), key


def test_fsdp_keeps_the_best_checkpoint_decided_once_for_every_process(tmp_path):
    """`checkpoint.keep_best` on two sharded processes whose evaluations disagree (process 1
    finds every one the best so far): each best step's checkpoint is a collective save, so
    rank 0's decision is every process's, and `checkpoints/best` is the step whose evaluation
    rank 0 logged as the best (decided apart, process 1 would save alone and wait forever)."""
    data = yaml.safe_load(_faulty_config(tmp_path, "fsdp", every=0).read_text())
    data["checkpoint"] = {"every": 0, "keep_last": 1, "keep_best": "reward"}
    data["eval"].update(every=1, temperature=1.0)
    data["trainer"]["learning_rate"] = 3e-2
    config = write_config(tmp_path, data, "best.yaml")
    done = _launch(config, "evalskew:1", timeout=300)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval/reward"] for r in rows if "eval/reward" in r and r["step"] >= 1}
    step = max(evals, key=lambda s: (evals[s], -s))
    best = json.loads((run / "checkpoints" / "best" / "best.json").read_text())
    assert best == {"step": step, "metric": "reward", "value": evals[step]}
    assert json.loads((run / "summary.json").read_text())["best_checkpoint"]["step"] == step


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_with_ray_rollouts_end_where_one_in_process_learner_does(
    tmp_path, single, parallel
):
    """`distributed.backend: ray` under `--nproc 2`: each learner process starts a Ray instance
    of its own and rolls out its share of the step's items on its actors (with fsdp, fed the
    whole weights that every process gathers after each step); the update is the single
    process's within float rounding (numerics.py), as with in-process rollouts."""
    pytest.importorskip("ray", reason="needs Ray: pip install 'honed[distributed]'")
    data = yaml.safe_load(_config(tmp_path, "run", 2, parallel).read_text())
    data["distributed"] = {"backend": "ray", "num_rollout_workers": 1}
    _train(write_config(tmp_path, data, "ray.yaml"), "--nproc", "2")
    run = tmp_path / "run"
    assert _samples(run, 1) == _samples(single, 1) != []
    for step in (1, 2):
        assert_weights_close(_weights(run, step), _weights(single, step))
