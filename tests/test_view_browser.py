"""`honed view` in a real browser (headless Chromium through Playwright), on runs the tests
make: a short GRPO run on the tiny model and a skill run against a local fake server. The page
draws the curves (pixels of the series' colour on the canvas, not an empty chart), opens a
step's rollouts and a skill diff, and shows a new metric point while a run writes, without a
reload. Skips (saying how to enable them) without Chromium or Playwright."""

from __future__ import annotations

import json
import threading

import pytest
from browser import COUNT_PIXELS, browser_page, require_browser, viewer
from openai_server import FakeOpenAIServer
from skill_world import World, write_config
from tiny_run import small_config, spread_env_data

from honed.cli import main
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir

pytest.importorskip(
    "starlette", reason="honed view needs the view extra: pip install 'honed[view]'"
)
pytest.importorskip("uvicorn", reason="honed view needs the view extra: pip install 'honed[view]'")

try:  # without Playwright, the `chromium` fixture skips (or fails) saying how to install it
    from playwright.sync_api import expect
except ImportError:
    expect = None

FIRST_RUN_COLOUR = (47, 111, 222)  # PALETTE[0], #2f6fde


@pytest.fixture(scope="module")
def chromium():
    return require_browser()


@pytest.fixture(scope="module")
def root(tmp_path_factory, chromium):
    base = tmp_path_factory.mktemp("browser")
    root = base / "runs"
    config = small_config(base, "trainer.max_steps=6", data=spread_env_data(base))
    GRPOTrainer(config, RunDir(root / "grpo")).train()
    with pytest.MonkeyPatch.context() as mp:  # a CI proxy must not see the local server
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        mp.setenv("no_proxy", "127.0.0.1,localhost")
        with FakeOpenAIServer(World(), models=("target", "reflector")) as server:
            skills = write_config(base, server.base_url)
            args = ["skills", "train", str(skills), "--run-dir", str(root / "skills"), "--quiet"]
            assert main(args) == 0
    return root


@pytest.fixture(scope="module")
def url(root):
    with viewer(root) as address:
        yield address


def test_the_runs_page_lists_both_runs(url, chromium):
    with browser_page(chromium) as page:
        page.goto(url)
        page.wait_for_selector("#runs tr[data-run='skills']")
        assert page.locator("#runs tr[data-run='grpo']").inner_text().count("finished") == 1
        page.locator("#runs tr[data-run='grpo'] input[type=checkbox]").check()
        page.locator("#compare").click()
        page.wait_for_selector("[data-key='reward/mean'] canvas")
        assert "#/curves?runs=grpo" in page.url


def test_curves_are_drawn(url, chromium):
    with browser_page(chromium) as page:
        page.goto(url + "#/curves?runs=grpo&smooth=0")
        chart = page.locator("[data-key='reward/mean']")
        chart.wait_for()
        assert chart.get_attribute("data-points") == "6"
        expect(chart).to_have_attribute("data-drawn", "6")
        page.wait_for_timeout(300)  # uPlot draws on the next animation frame
        drawn = page.evaluate(COUNT_PIXELS, ["reward/mean", list(FIRST_RUN_COLOUR)])
        assert drawn > 150, drawn  # a line across the plot, not an empty canvas
        # the x axis can be the rollouts generated: 4 prompts x 4 completions per step
        assert chart.get_attribute("data-xmax") == "6"
        page.select_option("#axis", "rollouts")
        expect(chart).to_have_attribute("data-xmax", str(6 * 4 * 4))


def test_a_steps_rollouts_open_and_filter(url, chromium, root):
    record = json.loads((root / "grpo" / "rollouts" / "step_000003.json").read_text())
    first = record["groups"][0]["trajectories"][0]
    with browser_page(chromium) as page:
        page.goto(url + "#/rollouts?run=grpo&step=3")
        page.wait_for_selector(".group")
        assert page.locator(".group").count() == len(record["groups"])
        page.locator(".group[data-group='0'] tr.traj[data-traj='0']").click()
        shown = page.locator(".group[data-group='0'] .completion").inner_text()
        assert shown == first["completion"]
        # rewards above every completion's: nothing left
        top = max(t["reward"] for g in record["groups"] for t in g["trajectories"])
        page.fill("#reward-min", str(top + 1))
        expect(page.locator("tr.traj")).to_have_count(0)
        page.fill("#reward-min", "")
        page.click("#prev")
        page.wait_for_url("**step=2")
        page.wait_for_selector("#rollouts-note >> text=Step 2")


def test_a_skill_diff_opens(url, chromium, root):
    history = json.loads((root / "skills" / "state.json").read_text())["history"]
    accepted = next(h["step"] for h in history if h["outcome"] == "accepted")
    with browser_page(chromium) as page:
        page.goto(url + "#/skills?run=skills")
        page.wait_for_selector("#skill-steps")
        page.click(f"#skill-steps tr[data-step='{accepted}']")
        page.wait_for_selector("#step-detail .diff .ins")
        added = page.locator("#step-detail .diff .ins").all_inner_texts()
        assert any("questions, answer with the word" in line for line in added)
        assert "accepted" in page.locator("#step-detail").inner_text()
        # two versions side by side: v1 against the latest
        page.locator("#versions input[name=a]").first.check()
        page.wait_for_selector("#version-pane .diff .ins")
        page.click("#version-pane button")
        page.wait_for_selector("#version-pane .markdown li")


def test_a_new_metric_point_appears_while_a_run_writes(tmp_path, chromium):
    """The run is held after step 3 until the page shows it, then after step 4 (so that the
    new point arrives alone, before the final evaluation), then let go."""
    config = small_config(tmp_path, "trainer.max_steps=5", data=spread_env_data(tmp_path))
    trainer = GRPOTrainer(config, RunDir(tmp_path / "runs" / "live"))
    holds = {3: (threading.Event(), threading.Event()), 4: (threading.Event(), threading.Event())}
    step = trainer.train_step

    def train_step():
        if trainer.step in holds:  # steps up to this one are logged: wait for the test
            reached, go_on = holds[trainer.step]
            reached.set()
            assert go_on.wait(60)
        return step()

    trainer.train_step = train_step
    run = threading.Thread(target=trainer.train)
    run.start()
    try:
        assert holds[3][0].wait(60)
        with viewer(tmp_path / "runs") as address, browser_page(chromium) as page:
            page.goto(address + "#/curves?runs=live&smooth=0")
            chart = page.locator("[data-key='reward/mean']")
            chart.wait_for()
            assert chart.get_attribute("data-points") == "3"
            expect(chart).to_have_attribute("data-drawn", "3")
            page.evaluate("window.sameDocument = true")
            holds[3][1].set()
            assert holds[4][0].wait(60)
            # the page asks for new rows every two seconds
            expect(chart).to_have_attribute("data-points", "4", timeout=20_000)
            expect(chart).to_have_attribute("data-drawn", "4")  # on the canvas, not only counted
            assert page.evaluate("window.sameDocument === true")  # no reload
    finally:
        for _, go_on in holds.values():
            go_on.set()
        run.join(120)


def test_a_warm_start_is_drawn_against_its_own_steps_only(tmp_path, chromium):
    """The warm-start's loss (`warmstart.jsonl`) is a chart of its own group; its steps count
    warm-start batches, so on the rollouts axis it has no place, even where GRPO logged a step
    of the same number."""
    run = tmp_path / "runs" / "sft"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    warm = [{"step": i, "loss": 4.0 / i} for i in range(1, 6)]
    grpo = [{"step": i, "reward/mean": 0.1 * i, "sampling/rollouts_total": 16 * i} for i in (1, 2)]
    for name, rows in (("warmstart.jsonl", warm), ("metrics.jsonl", grpo)):
        (run / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    with viewer(tmp_path / "runs") as address, browser_page(chromium) as page:
        page.goto(address + "#/curves?runs=sft&smooth=0")
        page.locator("summary", has_text="warmstart").click()
        chart = page.locator("[data-key='warmstart/loss']")
        chart.wait_for()
        expect(chart).to_have_attribute("data-drawn", "5")
        assert chart.get_attribute("data-xmax") == "5"
        page.select_option("#axis", "rollouts")
        expect(page.locator("[data-key='reward/mean']")).to_have_attribute("data-xmax", "32")
        expect(chart).to_have_attribute("data-xmax", "")
