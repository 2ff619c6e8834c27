"""Opening someone else's run must not run their code, reach outside the run, or leak secrets.

Each test plants what a crafted run directory could hold and checks that honed refuses it with
one clear line (exit code 2) and that nothing happened outside the run.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from tiny_run import write_config

from honed.cli import main
from honed.errors import HonedError
from honed.runs.state import load_state, rng_state, set_rng_state


class _Payload:
    """Unpickling this runs a shell command: what a crafted trainer state would carry."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _train(tmp_path, capsys, *args: str) -> tuple[int, list[str]]:
    config = write_config(tmp_path)
    code = main(["train", str(config), "--quiet", "--run-dir", str(tmp_path / "run"), *args])
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_crafted_trainer_state_is_refused_and_runs_nothing(tmp_path, capsys):
    code, _ = _train(tmp_path, capsys, "-o", "trainer.max_steps=1")
    assert code == 0
    [state_file] = (tmp_path / "run" / "checkpoints").glob("step_*/trainer_state.pt")
    state = torch.load(state_file, weights_only=True)
    marker = tmp_path / "pwned"
    state["initial_eval"] = {"accuracy": _Payload(str(marker))}
    torch.save(state, state_file)
    code, err = _train(tmp_path, capsys, "-o", "trainer.max_steps=2", "--resume")
    assert code == 2
    assert len(err) == 1 and str(state_file) in err[0] and "nothing in it was run" in err[0]
    assert "posix.system" in err[0] or "os.system" in err[0]  # names what it refused
    assert not marker.exists()


def test_state_files_hold_plain_data_and_older_numpy_states_still_load(tmp_path):
    """New states load under `weights_only=True` with no allowance at all; a state written
    before (NumPy's RNG key as an ndarray) loads through the NumPy array allowance and restores
    the same RNG streams."""
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    now = rng_state()
    path = tmp_path / "new.pt"
    torch.save({"step": 1, "rng": now}, path)
    torch.load(path, weights_only=True)  # no NumPy globals needed
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    old = {"step": 1, "rng": {**now, "numpy": None}}
    np.random.seed(2)
    old["rng"]["numpy"] = np.random.get_state()
    torch.save(old, tmp_path / "old.pt")
    for name in ("new.pt", "old.pt"):
        random.seed(9), np.random.seed(9), torch.manual_seed(9)
        set_rng_state(load_state(tmp_path / name)["rng"])
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


@pytest.mark.parametrize("content", [b"", b"not a zip", b"PK\x03\x04junk"])
def test_a_damaged_state_file_is_one_error_naming_it(tmp_path, content):
    path = tmp_path / "trainer_state.pt"
    path.write_bytes(content)
    with pytest.raises(HonedError, match=r"trainer_state\.pt: not a trainer state"):
        load_state(path)


# Symbolic links out of a run directory ------------------------------------------------------


def test_a_skill_run_whose_steps_link_outside_deletes_nothing(tmp_path):
    """`steps -> ..` once made a resume delete the sibling runs beside the run directory."""
    from honed.skills.rundir import SkillRunDir

    sibling = tmp_path / "step_0099"  # what `discard_after` would have taken for a late step
    (sibling / "keep").mkdir(parents=True)
    run = SkillRunDir(tmp_path / "run")
    run.path.mkdir()
    (run.path / "steps").symlink_to("..")
    with pytest.raises(HonedError, match=r"run/steps is a symbolic link \(to \.\.\)"):
        run.discard_after(step=1, versions=0, epochs_closed=0)
    with pytest.raises(HonedError, match="is a symbolic link"):
        run.discard_progress()
    assert (sibling / "keep").is_dir()


def test_a_shared_best_skill_linked_to_a_private_file_is_never_read(tmp_path):
    from honed.skills.rundir import SkillRunDir

    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE")
    run = SkillRunDir(tmp_path / "run")
    run.path.mkdir()
    (run.path / "best_skill.md").symlink_to(secret)
    with pytest.raises(HonedError, match=r"best_skill\.md is a symbolic link"):
        run.best_path.read_text()
    with pytest.raises(HonedError, match=r"best_skill\.md is a symbolic link"):
        run.create()  # refused before anything is written
    assert sorted(p.name for p in run.path.iterdir()) == ["best_skill.md"]


def test_a_grpo_resume_does_not_write_through_a_link_out_of_the_run(tmp_path, capsys):
    code, _ = _train(tmp_path, capsys, "-o", "trainer.max_steps=1")
    assert code == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    plot = tmp_path / "run" / "reward.png"
    plot.unlink()
    plot.symlink_to(victim)
    code, err = _train(tmp_path, capsys, "-o", "trainer.max_steps=2", "--resume")
    assert code == 2 and len(err) == 1 and "reward.png is a symbolic link" in err[0]
    assert victim.read_text() == "untouched"


def test_a_checkpoint_that_is_a_link_is_refused_in_or_out_of_the_run(tmp_path):
    """Links below a run's root are never followed, even to a neighbouring step: honed writes
    none, so one there is someone else's."""
    from honed.runs.rundir import RunDir

    run = RunDir(tmp_path / "run")
    (run.path / "checkpoints" / "step_1").mkdir(parents=True)
    (run.path / "checkpoints" / "step_1" / "trainer_state.pt").write_bytes(b"")
    assert [step for step, _ in run.step_checkpoints()] == [1]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "trainer_state.pt").write_bytes(b"")
    for target in ("step_1", outside):
        link = run.path / "checkpoints" / "step_2"
        link.symlink_to(target)
        with pytest.raises(HonedError, match=r"checkpoints/step_2 is a symbolic link"):
            run.latest_checkpoint()
        link.unlink()
    assert (outside / "trainer_state.pt").exists()


def test_plots_replace_a_link_instead_of_writing_through_it(tmp_path):
    from honed.runs.plots import plot_rewards

    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    out = tmp_path / "reward.png"
    out.symlink_to(victim)
    plot_rewards([{"step": 1, "reward/mean": 0.5}], out)
    assert victim.read_text() == "untouched"
    assert not out.is_symlink() and out.read_bytes().startswith(b"\x89PNG")


# A run directory's own config --------------------------------------------------------------


def test_reach_lists_code_and_hosts_anywhere_in_a_validated_config(tmp_path):
    from honed.config import Config
    from honed.runs.trust import reach

    config = Config.model_validate(
        {
            "envs": [
                {"name": "a", "type": "evil_module:Env"},
                {"name": "b", "type": "dataset", "args": {"reward": "run/r.py:score"}},
                {
                    "name": "c",
                    "type": "memory",
                    "args": {"reader": {"chat": {"base_url": "HTTPS://X.io/v1/"}}},
                },
                {"name": "d", "type": "qa", "args": {"note": "plain text: with a colon"}},
            ],
            "distributed": {
                "backend": "server",
                "server": {"base_url": "http://10.0.0.9:8000/v1", "model": "m"},
            },
        }
    )
    found = reach(config, ["AWS_SECRET"])
    assert found.imports == ["evil_module:Env", "run/r.py:score"]
    assert found.hosts == ["http://10.0.0.9:8000/v1", "https://x.io/v1"]
    assert found.secrets == ["AWS_SECRET"]


def test_eval_does_not_act_on_a_run_config_that_imports_code(tmp_path, capsys):
    code, _ = _train(tmp_path, capsys, "-o", "trainer.max_steps=1")
    assert code == 0
    run = tmp_path / "run"
    marker = tmp_path / "imported"
    (run / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Env:\n    pass\n")
    import yaml

    data = yaml.safe_load((run / "config.yaml").read_text())
    data["envs"].append({"name": "evil", "type": f"{run / 'evil.py'}:Env"})
    (run / "config.yaml").write_text(yaml.safe_dump(data))
    assert main(["eval", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "evil.py:Env" in err[0] and "--trust-run-config" in err[0]
    assert not marker.exists()
    # the user's own config is theirs: it is used as it is
    mine = write_config(tmp_path / "mine")
    assert main(["eval", str(run), "--config", str(mine), "--quiet", "--num-items", "2"]) == 0
    assert not marker.exists()


def test_keys_are_never_sent_on_a_run_configs_word(tmp_path):
    from skill_world import write_dataset

    from honed.runs.trust import load_run_config
    from honed.skills.config import SkillsConfig

    paths = write_dataset(tmp_path)
    config = tmp_path / "config.yaml"
    server = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "HF_TOKEN"}
    import yaml

    config.write_text(
        yaml.safe_dump(
            {
                "target": server,
                "optimizer": server,
                "envs": [{"name": "qa", "type": "qa", "args": {"path": paths["train"]}}],
            }
        )
    )
    with pytest.raises(HonedError, match=r"would contact http://127\.0\.0\.1:9/v1; send the"):
        load_run_config(SkillsConfig, config, [], trust=False)
    notes: list[str] = []
    loaded = load_run_config(SkillsConfig, config, [], trust=True, note=notes.append)
    assert loaded.target.api_key_env is None and loaded.reflector.api_key_env is None
    assert any("ignoring api_key_env (HF_TOKEN)" in n for n in notes)


def test_eval_of_a_loose_checkpoint_writes_where_it_is_told(tmp_path, capsys):
    code, _ = _train(tmp_path, capsys, "-o", "trainer.max_steps=1")
    assert code == 0
    [checkpoint] = (tmp_path / "run" / "checkpoints").glob("step_*")
    loose = tmp_path / "shared" / "model"
    loose.parent.mkdir()
    checkpoint.rename(loose)
    config = tmp_path / "config.yaml"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["eval", str(loose), "--config", str(config), "--quiet", "--num-items", "2"]) == 2
    assert "pass --out" in capsys.readouterr().err
    out = tmp_path / "result.json"
    args = ["eval", str(loose), "--config", str(config), "--out", str(out), "--quiet"]
    assert main([*args, "--num-items", "2"]) == 0
    assert out.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "result.json"])


def test_a_file_next_to_the_config_cannot_shadow_an_installed_module(tmp_path, monkeypatch):
    import sys

    from honed.reach import ImportSpec
    from honed.user_code import load_object

    (tmp_path / "colorsys.py").write_text("HIJACKED = True\n")
    (tmp_path / "my_reward_mod.py").write_text("def f(completions, **kw):\n    return [0.0]\n")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    sys.modules.pop("colorsys", None)
    spec = ImportSpec.parse("my_reward_mod:f", base=tmp_path)
    assert callable(load_object(spec, "reward function"))
    assert str(tmp_path) not in sys.path  # on the path for that import only
    import colorsys

    assert not hasattr(colorsys, "HIJACKED")
    sys.modules.pop("my_reward_mod", None)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://api.example.com/v1", True),
        ("http://127.0.0.1:8000/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://10.0.0.7:8000/v1", False),
        ("http://api.example.com/v1", False),
    ],
)
def test_a_key_goes_over_plain_http_only_to_this_machine(url, allowed):
    from pydantic import ValidationError

    from honed.models.chat import ChatModelConfig

    if allowed:
        ChatModelConfig(base_url=url, model="m", api_key_env="K")
    else:
        with pytest.raises(ValidationError, match="unencrypted; use https://"):
            ChatModelConfig(base_url=url, model="m", api_key_env="K")
        ChatModelConfig(base_url=url, model="m", api_key_env="K", allow_insecure_http=True)
    ChatModelConfig(base_url=url, model="m")  # no key: nothing secret to send


_RAY_SCRIPT = """
import os, subprocess, sys
import ipaddress
import psutil
from honed.distributed import secure_local_ray
secure_local_ray()
from honed.distributed.ray_backend import connect
import ray
assert connect("local")
print("own task", ray.get(ray.remote(lambda: 41 + 1).remote()), flush=True)
# every port the cluster's processes (this driver, GCS, raylet, workers) listen on
tree = {p.pid for p in psutil.Process().children(recursive=True)} | {os.getpid()}
hosts = {
    c.laddr.ip.removeprefix("::ffff:")
    for c in psutil.net_connections(kind="inet")
    if c.status == psutil.CONN_LISTEN and c.pid in tree
}
print("listening", len(hosts) > 0, all(ipaddress.ip_address(h).is_loopback for h in hosts), sorted(hosts), flush=True)
address = ray.get_runtime_context().gcs_address
env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
join = f"import ray; ray.init(address={address!r}); print('joined')"
outsider = subprocess.run(
    [sys.executable, "-c", join], env=env, capture_output=True, text=True, timeout=120
)
print("outsider", outsider.returncode, "joined" in outsider.stdout, flush=True)
# the control: a client holding the token joins the same address
insider = subprocess.run(
    [sys.executable, "-c", join], env=dict(os.environ), capture_output=True, text=True, timeout=120
)
print("insider", insider.returncode, "joined" in insider.stdout, flush=True)
ray.shutdown()
"""


def test_the_local_ray_cluster_honed_starts_listens_on_loopback_and_refuses_clients_without_its_token(
    tmp_path,
):
    """Every port the cluster opens is on 127.0.0.1, and an outside process (no token) cannot
    join the cluster, while the learner's own tasks run. Run in fresh interpreters: Ray reads
    these settings on import."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("ray") is None:
        if os.environ.get("HONED_REQUIRE_RAY"):
            raise RuntimeError("Ray is missing: pip install 'honed[distributed]'")
        pytest.skip("Ray is not installed: pip install 'honed[distributed]'")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAY_AUTH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"))
    }
    done = subprocess.run(
        [sys.executable, "-c", _RAY_SCRIPT],
        env={**env, "HOME": str(tmp_path)},  # no token file of this user's either
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "own task 42" in done.stdout, done.stderr[-2000:]
    assert "listening True True" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "outsider 1 False" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "insider 0 True" in done.stdout, done.stdout + done.stderr[-2000:]
