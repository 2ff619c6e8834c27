"""The screenshots of `honed view` in docs/images/: trains the small runs they show (two GRPO
runs of the tiny model on additions, a short memory-agent run, a skill run against the tests'
fake server), serves them with `honed view`, and photographs each page in headless Chromium.

    .venv/bin/python dev/view_screenshots.py            # writes docs/images/view-*.png
    .venv/bin/python dev/view_screenshots.py --keep DIR # also keeps the runs in DIR

Needs the dev extra (Playwright) and Chromium (`apt-get install chromium`); a few minutes on a
laptop CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from browser import browser_page, require_browser, viewer  # noqa: E402
from openai_server import FakeOpenAIServer  # noqa: E402
from skill_world import World, write_config  # noqa: E402

from honed.cli import main  # noqa: E402

SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 1024,
}


def grpo(folder: Path, name: str, lr: float) -> None:
    config = folder / f"{name}.yaml"
    config.write_text(
        f"""seed: 0
torch_threads: 1
policy: {{model: tiny, tiny: {SMALL}}}
envs:
  - name: addition
    args: {{levels: [1, 2], train_size: 200, test_size: 32, validation_size: 16, partial_credit: 0.5}}
curriculum: {{strategy: easy_first, score: reward, reward_range: [0, 1]}}
sft: {{steps: 600, batch_size: 32, learning_rate: 3.0e-3, warmup_steps: 20}}
trainer: {{max_steps: 60, prompts_per_step: 8, num_generations: 8, learning_rate: {lr},
          max_completion_length: 4}}
eval: {{num_items: 32, every: 10}}
checkpoint: {{every: 0}}
logging: {{progress: false}}
"""
    )
    assert main(["train", str(config), "--run-dir", str(folder / "runs" / name), "--quiet"]) == 0


def memory(folder: Path) -> None:
    config = folder / "memory.yaml"
    config.write_text(
        f"""seed: 0
torch_threads: 1
policy: {{model: tiny, tiny: {SMALL}}}
envs:
  - name: memory
    args: {{quote: true, recent: 2, grouping: instance, train_size: 16, validation_size: 4, test_size: 4}}
sft: {{steps: 400, batch_size: 16, learning_rate: 3.0e-3, warmup_steps: 20, prompt_loss_weight: 0.2}}
trainer: {{max_steps: 3, prompts_per_step: 2, num_generations: 4, max_completion_length: 40,
          learning_rate: 2.0e-4}}
eval: {{num_items: 4}}
checkpoint: {{every: 0}}
logging: {{progress: false}}
"""
    )
    args = ["train", str(config), "--run-dir", str(folder / "runs" / "memory_agent"), "--quiet"]
    assert main(args) == 0


def skills(folder: Path) -> None:
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    with FakeOpenAIServer(World(), models=("target", "reflector")) as server:
        config = write_config(folder, server.base_url)
        args = ["skills", "train", str(config), "--run-dir", str(folder / "runs" / "skills_qa")]
        assert main([*args, "--quiet"]) == 0


def shoot(root: Path, out: Path) -> None:
    chromium = require_browser()
    with viewer(root) as url, browser_page(chromium, 1400, 860) as page:

        def snap(name: str, hash_: str, ready: str, then=None) -> None:
            page.goto(url + hash_)
            page.wait_for_selector(ready)
            if then:
                then()
            page.wait_for_timeout(800)
            page.screenshot(path=str(out / f"view-{name}.png"))
            print(f"wrote {out / f'view-{name}.png'}")

        def compare() -> None:
            page.locator("#runs input[type=checkbox]").nth(0).check()

        snap("runs", "#/", "#runs tr[data-run]", compare)
        snap(
            "curves",
            "#/curves?runs=addition_lr3e-4,addition_lr1e-3&smooth=0.6",
            "[data-key='reward/mean'] canvas",
        )

        def open_turns() -> None:
            page.locator(".group[data-group='0'] tr.traj[data-traj='0']").click()
            filled = page.locator("details.memory summary")  # an empty memory has no table
            if filled.count():
                filled.nth(min(1, filled.count() - 1)).click()

        snap("rollouts", "#/rollouts?run=memory_agent&step=3", ".group", open_turns)
        snap("curriculum", "#/curriculum?run=addition_lr1e-3", ".hist")
        history = "#/skills?run=skills_qa&step=2&a=1&b=4"
        snap("skills", history, "#step-detail .diff")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="keep the runs in this folder")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        grpo(folder, "addition_lr3e-4", 3e-4)
        grpo(folder, "addition_lr1e-3", 1e-3)
        memory(folder)
        skills(folder)
        shoot(folder / "runs", args.out)


if __name__ == "__main__":
    cli()
