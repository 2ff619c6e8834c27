"""`honed view`'s server without a browser: the runs it lists, live metrics, rollouts of both
loops, skill diffs; and that it reads only what is under its root (traversal through URLs,
encoded too, and links out of the root are refused) and never writes there."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
from tiny_run import small_config, spread_env_data

from honed.cli import main
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir

pytest.importorskip(
    "starlette", reason="honed view needs the view extra: pip install 'honed[view]'"
)
pytest.importorskip("uvicorn", reason="honed view needs the view extra: pip install 'honed[view]'")

from starlette.testclient import TestClient

from honed.view.app import create_app
from honed.view.catalog import Catalog, RunFiles, status
from honed.view.skill_runs import diff


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A folder of runs: a short GRPO run, a fake skill run, and things that are not runs."""
    base = tmp_path_factory.mktemp("view")
    root = base / "runs"
    config = small_config(base, data=spread_env_data(base))
    GRPOTrainer(config, RunDir(root / "grpo")).train()
    _skill_run(root / "team" / "skills")
    nested = root / "grpo" / "checkpoints" / "copied_run"  # a run's own folders hold no runs
    nested.mkdir(parents=True)
    for name in ("config.yaml", "metrics.jsonl"):
        (nested / name).write_text((root / "grpo" / name).read_text())
    (root / "notes").mkdir()
    (root / "notes" / "config.yaml").write_text("seed: 1\n")  # a config alone is not a run
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (outside / "config.yaml").write_text("seed: 0\n")
    (outside / "metrics.jsonl").write_text('{"step": 1, "secret": 1}\n')
    os.symlink(outside, root / "linked_out")  # a whole "run" outside the root, linked in
    return root


def _skill_run(path: Path) -> None:
    """The files `honed skills train` writes, for two steps (one accepted, one rejected)."""
    (path / "skills").mkdir(parents=True)
    (path / "skills" / "v0001.md").write_text("# Skill\n\n- be brief\n")
    (path / "skills" / "v0002.md").write_text("# Skill\n\n- be brief\n- show the number\n")
    (path / "config.yaml").write_text(
        "seed: 3\ntarget: {model: t}\nreflector: {model: r}\ntrain: {epochs: 1, steps_per_epoch: 2}\n"
    )
    versions = [
        {
            "version": 1,
            "step": 0,
            "source": "initial",
            "scores": {"hard": 0.2, "soft": 0.5, "n": 4},
        },
        {"version": 2, "step": 1, "source": "step", "scores": {"hard": 0.6, "soft": 0.8, "n": 4}},
    ]
    history = [
        {"step": 1, "epoch": 1, "outcome": "accepted", "version": 2, "metric_after": 0.6},
        {"step": 2, "epoch": 1, "outcome": "rejected", "version": 2, "metric_after": 0.1},
    ]
    (path / "state.json").write_text(
        json.dumps({"step": 2, "versions": versions, "history": history})
    )
    (path / "metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    for step, candidate in ((1, "v0002.md"), (2, None)):
        folder = path / "steps" / f"step_{step:04d}"
        folder.mkdir(parents=True)
        text = (
            (path / "skills" / candidate).read_text()
            if candidate
            else "# Skill\n\n- never answer\n"
        )
        (folder / "candidate_skill.md").write_text(text)
        (folder / "gate.json").write_text(json.dumps({"outcome": history[step - 1]["outcome"]}))
        answers = [
            {
                "env": "qa",
                "item_key": "k1",
                "prompt": "Q1?",
                "reply": "A1",
                "hard": 1.0,
                "soft": 1.0,
            },
            {
                "env": "qa",
                "item_key": "k2",
                "prompt": "Q2?",
                "reply": "nope",
                "hard": 0.0,
                "soft": 0.3,
            },
        ]
        (folder / "rollouts.json").write_text(json.dumps(answers))
    (path / "summary.json").write_text(
        json.dumps({"best_version": 2, "eval": {"best": {"hard": 0.7}}})
    )


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    """Every path under root (links not followed) with its size and modification time."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def client(root):
    return TestClient(create_app(root, ["testserver", "127.0.0.1", "localhost"]))


def test_the_runs_under_the_root_are_listed_with_what_they_are(client, root):
    body = client.get("/api/runs").json()
    runs = {r["id"]: r for r in body["runs"]}
    assert set(runs) == {"grpo", "team/skills"}  # not the config-only folder, not the link out
    grpo = runs["grpo"]
    assert (grpo["kind"], grpo["status"], grpo["steps"], grpo["max_steps"]) == (
        "grpo",
        "finished",
        4,
        4,
    )
    assert grpo["config"]["model"] == "tiny" and grpo["config"]["envs"] == [
        "digits (tiny_run:DigitShareEnv)"
    ]
    summary = json.loads((root / "grpo" / "summary.json").read_text())
    assert grpo["final"]["final_accuracy"] == summary["final_eval"]["accuracy"]
    skills = runs["team/skills"]
    assert (skills["kind"], skills["steps"], skills["max_steps"]) == ("skills", 2, 2)
    assert skills["final"]["best_hard"] == 0.7
    single = TestClient(create_app(root / "grpo")).get("/api/runs").json()["runs"]
    assert [r["id"] for r in single] == ["."]  # the root may be one run


def _log_in_a_run(tmp_path: Path, name: str, text: str) -> tuple[Path, Path, TestClient]:
    """(the run folder, its log `name` holding `text`, a client of the viewer over tmp_path)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    (run / name).write_text(text)
    return run, run / name, TestClient(create_app(tmp_path))


def test_metrics_come_whole_then_only_the_new_rows(tmp_path):
    run, log, client = _log_in_a_run(
        tmp_path,
        "metrics.jsonl",
        '{"step": 1, "reward/mean": 0.5}\n{"step": 2, "reward/mean": NaN}\n{"step": 3, "rew',
    )
    first = client.get("/api/metrics", params={"run": "run"}).json()
    assert first["reset"] and first["total"] == 2  # the line being written is left for later
    assert [r["reward/mean"] for r in first["rows"]] == [0.5, None]  # NaN is not JSON
    gen = first["generation"]
    with log.open("a") as fh:
        fh.write('ard/mean": 0.75}\nnot json\n{"step": 4, "reward/mean": 1.0}\n')
    more = client.get("/api/metrics", params={"run": "run", "after": 2, "gen": gen}).json()
    assert not more["reset"] and [r["step"] for r in more["rows"]] == [3, 4]
    # a resumed run rewrites its log (atomically: a new file) without the later steps
    # (here resumed from step 1 and already past where the page was)
    tmp = run / ".metrics.tmp"
    tmp.write_text("".join(f'{{"step": {i}, "reward/mean": 0.25}}\n' for i in range(1, 7)))
    os.replace(tmp, log)
    again = client.get("/api/metrics", params={"run": "run", "after": 4, "gen": gen}).json()
    assert again["reset"] and [r["step"] for r in again["rows"]] == [1, 2, 3, 4, 5, 6]


def test_the_warm_start_comes_first_in_the_metrics_under_its_own_keys(tmp_path):
    """`honed sft`'s log is served before GRPO's rows, its keys under `warmstart/` and each row
    marked, so that its batch steps are not read as GRPO steps (the run's step count included)."""
    run, warm, client = _log_in_a_run(
        tmp_path,
        "warmstart.jsonl",
        '{"step": 10, "loss": 2.0}\n{"step": 20, "check/accuracy": 0.5, "check/threshold": 0.9}\n',
    )
    first = client.get("/api/metrics", params={"run": "run"}).json()
    assert first["rows"] == [
        {"step": 10, "phase": "warmstart", "warmstart/loss": 2.0},
        {
            "step": 20,
            "phase": "warmstart",
            "warmstart/check/accuracy": 0.5,
            "warmstart/check/threshold": 0.9,
        },
    ]
    log = run / "metrics.jsonl"
    log.write_text('{"step": 1, "reward/mean": 0.5}\n{"step": 2, "reward/mean": 0.75}\n')
    gen = first["generation"]
    grpo = client.get("/api/metrics", params={"run": "run", "after": 2, "gen": gen}).json()
    assert grpo["reset"]  # GRPO's log appeared: a new generation, everything again
    assert [r.get("phase") for r in grpo["rows"]] == ["warmstart", "warmstart", None, None]
    with log.open("a") as fh:
        fh.write('{"step": 3, "reward/mean": 1.0}\n')
    more = client.get("/api/metrics", params={"run": "run", "after": 4, "gen": grpo["generation"]})
    assert not more.json()["reset"] and more.json()["rows"] == [{"step": 3, "reward/mean": 1.0}]
    assert client.get("/api/run", params={"run": "run"}).json()["steps"] == 3
    # a warm-start started again starts its log again, as a new file (RunDir.restart_log),
    # here with as many rows as the page has, so only the new file tells the change
    tmp = run / ".warmstart.tmp"
    tmp.write_text('{"step": 10, "loss": 1.5}\n{"step": 20, "loss": 1.25}\n')
    os.replace(tmp, warm)
    again = client.get(
        "/api/metrics", params={"run": "run", "after": 5, "gen": more.json()["generation"]}
    )
    assert again.json()["reset"] and again.json()["rows"][0]["warmstart/loss"] == 1.5


def test_a_grpo_steps_rollouts_and_curriculum_are_served(client, root):
    steps = client.get("/api/rollouts", params={"run": "grpo"}).json()["steps"]
    assert steps == [1, 2, 3, 4]
    record = client.get("/api/rollouts/step", params={"run": "grpo", "step": 2}).json()
    on_disk = json.loads((root / "grpo" / "rollouts" / "step_000002.json").read_text())
    assert record == on_disk
    snap = client.get("/api/curriculum", params={"run": "grpo", "step": 3}).json()
    assert snap["step"] == 3 and snap["curriculum"] == on_disk["curriculum"] | snap["curriculum"]
    assert snap["curriculum"]["digits"]["items"] == 20
    latest = client.get("/api/curriculum", params={"run": "grpo"}).json()
    assert latest["step"] == 4
    assert client.get("/api/rollouts/step", params={"run": "grpo", "step": 9}).status_code == 404
    assert client.get("/api/rollouts/step", params={"run": "grpo", "step": "x"}).status_code == 400


def test_a_skill_runs_answers_versions_diffs_and_steps_are_served(client):
    record = client.get("/api/rollouts/step", params={"run": "team/skills", "step": 1}).json()
    (g1, g2) = record["groups"]
    assert (g1["item"], g1["trajectories"][0]["completion"], g1["trajectories"][0]["reward"]) == (
        "k1",
        "A1",
        1.0,
    )
    assert g2["trajectories"][0]["success"] == 0.0
    overview = client.get("/api/skills", params={"run": "team/skills"}).json()
    assert [v["version"] for v in overview["versions"]] == [1, 2] and overview["files"] == [1, 2]
    assert [s["outcome"] for s in overview["steps"]] == ["accepted", "rejected"]
    d = client.get("/api/skills/diff", params={"run": "team/skills", "a": 1, "b": 2}).json()["diff"]
    assert [o["op"] for o in d] == ["equal", "insert"] and d[1]["after"] == ["- show the number"]
    step2 = client.get("/api/skills/step", params={"run": "team/skills", "step": 2}).json()
    assert step2["base_version"] == 2 and step2["gate"] == {"outcome": "rejected"}
    ops = {o["op"]: o for o in step2["diff"]}
    assert ops["replace"]["before"] == ["- be brief", "- show the number"]
    assert ops["replace"]["after"] == ["- never answer"]
    doc = client.get("/api/skills/version", params={"run": "team/skills", "v": 2}).json()
    assert "<li>show the number</li>" in doc["html"]


def test_markdown_from_a_model_is_shown_never_run():
    from honed.view.skill_runs import render

    html = render("<script>alert(1)</script>\n\n[x](javascript:alert(1))")
    assert "<script>" not in html and "&lt;script&gt;" in html and 'href="javascript' not in html


def test_diff_lists_changed_lines_with_their_numbers():
    ops = diff("a\nb\nc\n", "a\nB\nc\nd\n")
    assert [(o["op"], o["before"], o["after"], o["at"]) for o in ops] == [
        ("equal", ["a"], ["a"], [1, 1]),
        ("replace", ["b"], ["B"], [2, 2]),
        ("equal", ["c"], ["c"], [3, 3]),
        ("insert", [], ["d"], [4, 4]),
    ]


TRAVERSALS = [
    "..",
    "../outside",
    "grpo/../../outside",
    "/etc",
    "%2e%2e",
    "..%2Foutside",
    "linked_out",
    "grpo/\x00",
    "notes",
    "grpo\\..\\..",
]


@pytest.mark.parametrize("run", TRAVERSALS)
def test_no_run_outside_the_root_is_served(client, run):
    for route in ("run", "metrics", "rollouts", "skills", "curriculum"):
        response = client.get(f"/api/{route}", params={"run": run})
        assert response.status_code == 404, (route, run)
        assert "secret" not in response.text


@pytest.mark.parametrize(
    "url",
    [
        "/api/metrics?run=%2E%2E%2Foutside",
        "/api/metrics?run=..%252Foutside",
        "/static/../../outside/secret.txt",
        "/static/%2e%2e/%2e%2e/%2e%2e/outside/secret.txt",
        "/static/..%2f..%2f..%2foutside%2fsecret.txt",
        "/api/skills/version?run=team/skills&v=-1",
        "/api/rollouts/step?run=grpo&step=-1",
        "/../outside/secret.txt",
    ],
)
def test_raw_urls_that_climb_out_get_nothing(client, url):
    response = client.get(url)
    assert response.status_code in (400, 404), url
    assert "secret" not in response.text


def test_a_link_inside_a_run_that_leads_out_is_not_followed(tmp_path):
    run = tmp_path / "root" / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "secret.json").write_text('{"step": 1, "groups": [{"secret": 1}]}')
    (tmp_path / "secret.jsonl").write_text('{"step": 1, "secret": 1}\n')
    os.symlink(tmp_path / "secret.jsonl", run / "metrics.jsonl")
    os.symlink(tmp_path / "secret.json", run / "rollouts" / "step_000001.json")
    client = TestClient(create_app(tmp_path / "root"))
    assert client.get("/api/metrics", params={"run": "run"}).json()["rows"] == []
    assert client.get("/api/rollouts/step", params={"run": "run", "step": 1}).status_code == 404


def test_browsing_writes_nothing_and_only_reads_are_allowed(client, root):
    before = _tree(root)
    for url in (
        "/",
        "/api/runs",
        "/api/metrics?run=grpo",
        "/api/rollouts?run=grpo",
        "/api/rollouts/step?run=grpo&step=1",
        "/api/curriculum?run=grpo",
        "/api/skills?run=team/skills",
        "/api/skills/step?run=team/skills&step=1",
        "/api/skills/diff?run=team/skills&a=1&b=2",
        "/static/app.js",
    ):
        assert client.get(url).status_code == 200, url
    assert client.post("/api/runs").status_code == 405
    assert client.put("/static/app.js", content=b"x").status_code == 405
    assert _tree(root) == before


def test_the_page_loads_only_its_own_files(client):
    import re

    page = client.get("/")
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    links = re.findall(r'(?:src|href)="([^"]*)"', page.text)
    assert links and all(link.startswith(("/static/", "data:")) for link in links), links
    static = Path(__file__).parents[1] / "src" / "honed" / "view" / "static"
    for script in static.glob("*.js"):
        text = script.read_text()
        assert "http://" not in text and "https://" not in text, script.name
        for target in re.findall(r'from "([^"]+)"', text):
            assert target.startswith("./"), (script.name, target)
            assert client.get(f"/static/{target[2:]}").status_code == 200


def test_a_request_for_another_host_name_is_refused(root):
    client = TestClient(
        create_app(root, ["127.0.0.1", "localhost"]), base_url="http://attacker.example"
    )
    assert client.get("/api/runs").status_code == 400


def test_status_tells_running_finished_and_interrupted_apart(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    files = RunFiles(tmp_path, "r", run)
    now = time.time()
    os.utime(run / "metrics.jsonl", (now - 10, now - 10))
    os.utime(run / "config.yaml", (now - 20, now - 20))
    assert status(files, [], now).state == "running"
    assert status(files, [], now + 1000).state == "interrupted"
    # slow steps (10 minutes apart) keep a run "running" for three of them
    assert status(files, [0, 600, 1200], now + 1000).state == "running"
    (run / "summary.json").write_text("{}")
    assert status(files, [], now + 1000).state == "finished"
    os.utime(run / "summary.json", (now - 15, now - 15))  # resumed after it finished
    assert status(files, [], now).state == "running"


def test_catalog_refuses_a_root_that_is_not_a_folder(tmp_path):
    from honed.errors import HonedError

    with pytest.raises(HonedError, match="not a directory"):
        Catalog(tmp_path / "missing")


def test_honed_view_without_the_extra_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a)
    )
    import uvicorn

    def started(*args, **kwargs):
        raise AssertionError("the server started without the view extra")

    monkeypatch.setattr(uvicorn.Server, "run", started)
    assert main(["view", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "honed: error: honed view needs uvicorn: pip install 'honed[view]'"


def test_honed_view_on_a_busy_port_or_a_missing_folder_is_one_clear_error(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["view", str(tmp_path), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
