"""The paper's GPU recipe (examples/memalpha_qwen3_4b.yaml) checked by `honed train --dry-run`."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai_server import FakeOpenAIServer

from honed.cli import main
from honed.config import load_config

ROOT = Path(__file__).parents[1]
RECIPE = ROOT / "examples" / "memalpha_qwen3_4b.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "memory"

pytest.importorskip("pyarrow", reason="parquet fixtures need pyarrow: pip install 'honed[memory]'")


def test_recipe_holds_the_papers_settings():
    config = load_config(str(RECIPE), [])
    t = config.trainer
    assert config.policy.model == "Qwen/Qwen3-4B" and config.policy.lora is None
    assert (t.learning_rate, t.prompts_per_step, t.num_generations) == (1e-6, 32, 8)
    assert t.warmup_steps / t.max_steps == pytest.approx(0.05, abs=0.002)
    assert (t.epsilon, t.loss_type, t.temperature, t.top_p) == (0.2, "dapo", 1.0, 1.0)
    assert (t.beta, t.kl_estimator, t.kl_in_reward) == (0.001, "k3", False)
    assert t.max_completion_length == 2048
    args = config.envs[0].args
    assert (args["compression_weight"], args["validity_weight"]) == (0.05, 0.1)
    assert args["reader"]["chat"]["model"] == args["chat"]["model"] == "Qwen/Qwen3-32B"


def _overrides(url: str) -> list[str]:
    paths = (
        f"{{train: {FIXTURES / 'memalpha' / 'train.parquet'}, "
        f"validation: {FIXTURES / 'memalpha' / 'test.parquet'}, "
        f"test: {FIXTURES / 'memalpha_memoryagentbench' / 'test.parquet'}}}"
    )
    return [
        "-o",
        f"envs.0.args.path={paths}",
        "-o",
        f"envs.0.args.reader.chat.base_url={url}",
        "-o",
        f"envs.0.args.chat.base_url={url}",
    ]


def test_dry_run_validates_the_recipe_and_prints_the_plan_without_a_gpu(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    with FakeOpenAIServer(models=("Qwen/Qwen3-32B",)) as server:
        code = main(["train", str(RECIPE), "--dry-run", *_overrides(server.base_url)])
        checked = [r.path for r in server.requests]
    assert code == 0
    assert checked.count("/v1/models") == 2  # the reader's and the judge's server answered
    out = capsys.readouterr().out
    for expected in (
        "Qwen/Qwen3-4B (full fine-tuning, gradient checkpointing)",
        "32 prompts × 8 generations per step",
        "1e-06, constant, 10 warm-up steps",
        "dapo aggregation, clip 0.2–0.2",
        "k3 × 0.001 (in the loss)",
        "train 3, validation 2, test 4",
        "dry run: nothing was written",
    ):
        assert expected in out, expected
    assert not any(tmp_path.iterdir())  # no run directory, no checkpoint


def test_dry_run_stops_on_missing_data_and_on_an_unreachable_server(tmp_path, capsys):
    with FakeOpenAIServer(models=("Qwen/Qwen3-32B",)) as server:
        missing = [*_overrides(server.base_url), "-o", "envs.0.args.path=/nowhere/train.parquet"]
        assert main(["train", str(RECIPE), "--dry-run", *missing]) == 2
        assert "no such file: /nowhere/train.parquet" in capsys.readouterr().err
    with FakeOpenAIServer(models=("Qwen/Qwen3-32B",)) as server:
        url = server.base_url
    assert main(["train", str(RECIPE), "--dry-run", *_overrides(url)]) == 2  # server is gone
    assert url.split("//")[1].split("/")[0] in capsys.readouterr().err
