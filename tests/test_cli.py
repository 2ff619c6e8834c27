"""Bad input: one clear line, exit code 2, no traceback, and nothing already written is lost."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from tiny_run import small_config_data, write_config

from honed.cli import main
from honed.config import apply_override, load_config
from honed.errors import HonedError


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_unknown_key_names_the_key_and_the_closest_valid_one(tmp_path, capsys):
    path = write_config(tmp_path)
    code, err = _run(capsys, "train", str(path), "-o", "trainer.max_step=3")
    assert code == 2
    assert err.strip().splitlines() == [
        f"honed: error: {path}: unknown config key 'trainer.max_step' "
        "(did you mean 'trainer.max_steps'?)"
    ]
    assert "Traceback" not in err


def test_unknown_key_inside_a_yaml_file(tmp_path, capsys):
    data = small_config_data(tmp_path)
    data["trainer"]["num_generation"] = 4
    code, err = _run(capsys, "train", str(write_config(tmp_path, data)))
    assert code == 2 and "did you mean 'trainer.num_generations'" in err


def test_invalid_value_is_named(tmp_path, capsys):
    code, err = _run(capsys, "train", str(write_config(tmp_path)), "-o", "trainer.loss_type=ppo")
    assert code == 2 and "'trainer.loss_type'" in err and "grpo" in err


def test_missing_config_file(tmp_path, capsys):
    code, err = _run(capsys, "train", str(tmp_path / "nope.yaml"))
    assert code == 2 and "config file not found" in err


def test_unknown_environment_name(tmp_path, capsys):
    data = small_config_data(tmp_path)
    data["envs"] = [{"name": "additon"}]
    code, err = _run(capsys, "train", str(write_config(tmp_path, data)))
    assert code == 2 and "unknown environment 'additon' (did you mean 'addition'?)" in err


def _dataset_run(tmp_path, lines: list[str], reward_body: str) -> dict:
    (tmp_path / "data.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "rw.py").write_text(reward_body)
    data = small_config_data(tmp_path)
    data["envs"] = [
        {
            "name": "d",
            "type": "dataset",
            "args": {"path": str(tmp_path / "data.jsonl"), "reward": f"{tmp_path / 'rw.py'}:f"},
        }
    ]
    return data


GOOD_REWARD = "def f(completions, **kw):\n    return [1.0 for _ in completions]\n"


def test_malformed_jsonl_line_is_reported_with_its_number(tmp_path, capsys):
    rows = [json.dumps({"prompt": f"{i}="}) for i in range(20)]
    rows[6] = '{"prompt": "7=",'
    data = _dataset_run(tmp_path, rows, GOOD_REWARD)
    code, err = _run(capsys, "train", str(write_config(tmp_path, data)))
    assert code == 2 and "line 7" in err and "data.jsonl" in err


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("def f(completions, **kw):\n    raise ValueError('boom')\n", "boom"),
        ("def f(completions, **kw):\n    return [float('nan') for _ in completions]\n", "nan"),
    ],
)
def test_reward_function_that_raises_or_returns_nan_keeps_the_run_dir(
    tmp_path, capsys, body, expected
):
    rows = [json.dumps({"prompt": f"{i}+{i}="}) for i in range(40)]
    data = _dataset_run(tmp_path, rows, body)
    code, err = _run(capsys, "train", str(write_config(tmp_path, data)))
    assert code == 2
    assert expected in err.lower() and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    # what was written before the error is intact
    assert (tmp_path / "run/config.yaml").is_file()


def test_debug_flag_shows_the_traceback(tmp_path, capsys):
    code, err = _run(capsys, "--debug", "train", str(tmp_path / "nope.yaml"))
    assert code == 2 and "Traceback" in err


def test_a_finished_run_is_not_overwritten_without_asking(tmp_path, capsys):
    path = write_config(tmp_path)
    assert main(["train", str(path), "--quiet", "-o", "trainer.max_steps=1"]) == 0
    before = (tmp_path / "run/summary.json").read_text()
    code, err = _run(capsys, "train", str(path), "--quiet")
    assert code == 2 and "--resume" in err and "--overwrite" in err
    assert (tmp_path / "run/summary.json").read_text() == before


def test_a_run_that_died_before_its_first_checkpoint_says_so(tmp_path, capsys):
    """Its metrics hold the initial evaluation and nothing resumes: the error says that
    --resume would start over, so the user is not sent to a resume that resumes nothing."""
    path = write_config(tmp_path)
    assert main(["train", str(path), "--quiet", "-o", "trainer.max_steps=1"]) == 0
    run = tmp_path / "run"
    metrics = run / "metrics.jsonl"
    first = metrics.read_text().splitlines()[0]
    assert json.loads(first)["step"] == 0  # the initial evaluation
    metrics.write_text(first + "\n")
    shutil.rmtree(run / "checkpoints")
    for name in ("summary.json", "run_state.json"):
        (run / name).unlink(missing_ok=True)
    code, err = _run(capsys, "train", str(path), "--quiet")
    assert code == 2 and "stopped before its first checkpoint" in err and "--overwrite" in err
    assert metrics.read_text().count("\n") == 1  # nothing was touched
    assert main(["train", str(path), "--quiet", "--resume", "-o", "trainer.max_steps=1"]) == 0


def test_overrides_parse_yaml_values_and_list_indices(tmp_path):
    data = {"trainer": {"max_steps": 1}, "envs": [{"name": "addition"}]}
    apply_override(data, "trainer.max_steps=20")
    apply_override(data, "envs.0.weight=2.5")
    apply_override(data, "envs.0.args={levels: [1, 2]}")
    apply_override(data, "policy.model=/some/dir")
    assert data["trainer"]["max_steps"] == 20
    assert data["envs"][0] == {"name": "addition", "weight": 2.5, "args": {"levels": [1, 2]}}
    assert data["policy"]["model"] == "/some/dir"
    with pytest.raises(HonedError, match="key=value"):
        apply_override(data, "trainer.max_steps")
    with pytest.raises(HonedError, match="not an index"):
        apply_override(data, "envs.3.weight=1")
    cfg = load_config(write_config(tmp_path), ["trainer.epsilon_high=0.28"])
    assert cfg.trainer.clip_high == 0.28


def test_help_reads_well():
    out = subprocess.run(
        [sys.executable, "-m", "honed", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for word in ("train", "eval", "sft", "skills", "--resume"):
        assert word in out


def test_config_prints_the_resolved_config_with_each_keys_help_and_it_loads_back(tmp_path, capsys):
    path = write_config(tmp_path)
    assert main(["config", str(path), "-o", "trainer.max_steps=7"]) == 0
    out = capsys.readouterr().out
    assert "  max_steps: 7\n" in out
    assert "# GRPO steps, one rollout batch each (as in TRL). [int ≥ 0; default: 100]" in out
    printed = tmp_path / "printed.yaml"
    printed.write_text(out)
    assert load_config(printed) == load_config(path, ["trainer.max_steps=7"])


def test_skills_config_prints_a_skills_config(tmp_path, capsys):
    from honed.skills.config import load_skills_config

    path = tmp_path / "skills.yaml"
    chat = {"base_url": "http://127.0.0.1:8000/v1", "model": "m"}
    path.write_text(json.dumps({"envs": [{"name": "addition"}], "target": chat, "reflector": chat}))
    assert main(["skills", "config", str(path), "-o", "edit_budget.mode=cosine"]) == 0
    out = capsys.readouterr().out
    assert "# The model name the server knows. [non-empty str; required]" in out
    printed = tmp_path / "printed.yaml"
    printed.write_text(out)
    assert load_skills_config(printed).edit_budget.mode == "cosine"


@pytest.mark.parametrize("command", [["config"], ["skills", "config"]])
def test_config_schema_is_a_json_schema_with_the_descriptions(capsys, command):
    assert main([*command, "--schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False  # editors flag unknown keys
    assert schema["properties"]["seed"]["description"].startswith(
        "Seeds" if "skills" in command else "Drives"
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["config", "{path}", "-o", "trainer.max_step=3"], "did you mean 'trainer.max_steps'"),
        (["config", "{tmp}/nope.yaml"], "config file not found"),
        # where the mistake is: PyYAML's first line ("while parsing ...") does not say
        (
            ["config", "{tmp}/bad.yaml"],
            "is not valid YAML: line 2, column 1: expected the node content",
        ),
        (["config", "--schema", "{path}"], "--schema describes every config"),
        (["skills", "config"], "give a skills CONFIG"),
        (["skills", "config", "{path}"], "invalid value for 'target'"),
    ],
)
def test_config_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys, argv, expected):
    path = write_config(tmp_path)
    (tmp_path / "bad.yaml").write_text("trainer: [\n")
    argv = [a.format(path=path, tmp=tmp_path) for a in argv]
    code, err = _run(capsys, *argv)
    assert code == 2 and expected in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_honed_eval_runs_on_the_configs_torch_threads(tmp_path, grpo_base, monkeypatch):
    """Evaluation uses the thread count training did (`torch_threads`): with another count
    some CPU kernels sum in another order, and greedy answers can change."""
    import torch
    from run_trees import copy_run

    _, base = grpo_base
    run = copy_run(base, tmp_path / "run")
    asked: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", asked.append)
    assert main(["eval", str(run), "--quiet", "-o", "torch_threads=1"]) == 0
    assert asked == [1]


def test_an_error_quoting_a_value_with_line_breaks_stays_one_line(tmp_path, capsys):
    """Whatever value an error message quotes (here an override key holding a line break and a
    Unicode line separator), the CLI prints it as one line, the breaks escaped."""
    path = write_config(tmp_path)
    code, err = _run(capsys, "train", str(path), "-o", "trainer.max\nst\u2028ep=3")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "max\\nst\\u2028ep" in err
