"""Imports and hosts: a config reaches outside honed only through values parsed into
`honed.reach.ImportSpec` and `honed.reach.Endpoint`, and YAML is data (docs/security.md,
"Imports and hosts" and "YAML").

`watching` fails nothing by itself: it records every `socket.connect` (and refuses
it) and every Python file read from the run directory, through an audit hook, so that a test
can say that nothing was imported and nothing contacted.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import importlib.util
import os
import py_compile
import re
import shutil
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_run import write_config

from honed.cli import main
from honed.config import Config, ServerConfig, load_config
from honed.errors import HonedError
from honed.reach import Endpoint, ImportSpec, reached

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Guard:
    """What happened while armed: connections tried, code files read under `root`."""

    root: str = ""
    connects: list[object] = field(default_factory=list)
    code_reads: list[str] = field(default_factory=list)


_ARMED: list[Guard] = []


def _audit(event: str, args: tuple) -> None:
    if not _ARMED:
        return
    guard = _ARMED[-1]
    if event == "socket.connect":
        guard.connects.append(args[1])
        raise ConnectionRefusedError("a test guard refuses every connection")
    if (
        event == "open"
        and isinstance(args[0], str | bytes | os.PathLike)
        and args[1] in (None, "r", "rb")
    ):
        path = os.fsdecode(args[0])
        if path.startswith(guard.root) and path.endswith((".py", ".pyc")):
            guard.code_reads.append(path)


sys.addaudithook(_audit)  # hooks stay for the process: `_audit` does nothing unless armed


@contextlib.contextmanager
def watching(root: Path) -> Iterator[Guard]:
    """Record connections and code read under `root` while the block runs."""
    watch = Guard(root=str(root))
    _ARMED.append(watch)
    try:
        yield watch
    finally:
        _ARMED.remove(watch)


def _evil(folder: Path, name: str = "evil.py") -> Path:
    """A module that leaves a marker when it runs."""
    marker = folder / "IMPORTED"
    path = folder / name
    path.write_text(f"open({str(marker)!r}, 'w').close()\nclass Env:\n    pass\n")
    return marker


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A GRPO run with a checkpoint (one step), copied by each test that changes it."""
    folder = tmp_path_factory.mktemp("trained")
    config = write_config(folder)
    args = ["train", str(config), "--quiet", "--run-dir", str(folder / "run")]
    assert main([*args, "-o", "trainer.max_steps=1"]) == 0
    return folder / "run"


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _set_run_config(run: Path, edit) -> None:
    data = yaml.safe_load((run / "config.yaml").read_text())
    edit(data)
    (run / "config.yaml").write_text(yaml.safe_dump(data))


# Item 1: every spelling the loader once accepted and the scan did not see ------------------


@pytest.mark.parametrize(
    ("spec", "planted", "named"),
    [
        ("{run}/evil.py:Env ", "evil.py", "evil.py:Env "),
        ("{run}/my evil.py:Env", "my evil.py", "my evil.py:Env"),
        ("{run}/evil.pyc:Env", "evil.pyc", "evil.pyc:Env"),
        ("{run}/evil.py:Énv", "evil.py", "evil.py:Énv"),
        ("{run}/evil.py:-", "evil.py", "evil.py:-"),
        ("{run}/evil.py\t:Env", "evil.py", "evil.py\\t:Env"),
    ],
)
@pytest.mark.parametrize("trust", [False, True])
def test_an_import_spec_the_loader_would_read_otherwise_is_refused_and_runs_nothing(
    run, capsys, spec, planted, named, trust
):
    marker = _evil(run, "evil.py")
    if planted == "evil.pyc":
        py_compile.compile(str(run / "evil.py"), cfile=str(run / "evil.pyc"))
    elif planted != "evil.py":
        shutil.copy(run / "evil.py", run / planted)
    _set_run_config(run, lambda d: d["envs"].append({"name": "evil", "type": spec.format(run=run)}))
    capsys.readouterr()
    flags = ["--trust-run-config"] if trust else []
    with watching(run) as guard:
        assert main(["eval", str(run), "--quiet", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err
    assert not marker.exists() and guard.code_reads == [] and guard.connects == []


@pytest.mark.parametrize("where", ["type", "reward"])
def test_a_binary_yaml_scalar_is_refused_before_it_can_become_a_string(run, capsys, where):
    marker = _evil(run)
    spec = base64.b64encode(f"{run}/evil.py:Env".encode()).decode()
    text = (run / "config.yaml").read_text()
    if where == "type":
        text = text.replace("envs:\n", f"envs:\n- name: evil\n  type: !!binary {spec}\n", 1)
    else:
        text = text.replace(
            "envs:\n", f"envs:\n- name: ds\n  args: {{reward: !!binary {spec}}}\n", 1
        )
    (run / "config.yaml").write_text(text)
    with watching(run) as guard:
        assert main(["eval", str(run), "--quiet", "--trust-run-config"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "binary" in err[0] and "is not accepted" in err[0], err
    assert not marker.exists() and guard.code_reads == []


def test_a_valid_spec_in_an_environments_arguments_is_listed_before_anything_runs(run, capsys):
    """`reached` sees into free-form arguments: the spec is parsed there, at validation."""
    marker = _evil(run)
    (run / "d.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n')
    _set_run_config(
        run,
        lambda d: d["envs"].append(
            {
                "name": "ds",
                "type": "dataset",
                "args": {"path": str(run / "d.jsonl"), "reward": [f"{run}/evil.py:Env"]},
            }
        ),
    )
    with watching(run) as guard:
        assert main(["eval", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"import and run {run}/evil.py:Env" in err[0], err
    assert not marker.exists() and guard.code_reads == []


# Item 2: hosts with whitespace, in every place that names one -------------------------------

SPACED = [" http://127.0.0.1:9/v1", "\thttp://127.0.0.1:9/v1", "http://127.0.0.1:9/v1\n"]


@pytest.mark.parametrize("url", SPACED)
def test_a_skills_run_whose_server_url_has_spaces_is_refused_and_never_contacted(
    tmp_path, capsys, url
):
    from skill_world import write_config as write_skills_config

    run = tmp_path / "skills_run"
    run.mkdir()
    write_skills_config(run, url).rename(run / "config.yaml")
    skill = tmp_path / "skill.md"
    skill.write_text("# Skill\n")
    args = ["skills", "eval", "--run-dir", str(run), "--skill", str(skill), "--quiet"]
    with watching(run) as guard:
        assert main([*args, "--trust-run-config"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "target.base_url" in err[0] and "spaces" in err[0], err
    assert guard.connects == []


@pytest.mark.parametrize("url", SPACED)
def test_an_llm_judge_or_memory_reader_url_with_spaces_is_refused_and_never_contacted(
    tmp_path, url
):
    from honed.envs.memory.retrieval import chat_model
    from honed.envs.rewards.functions import RewardSet

    judge = {"type": "llm_judge", "base_url": url, "model": "m", "rubric": "r"}
    with watching(tmp_path) as guard:
        with pytest.raises(HonedError, match="spaces"):
            RewardSet("env 'ds'", judge)
        with pytest.raises(HonedError, match=r"chat\.base_url: .*spaces"):
            chat_model({"base_url": url, "model": "m"}, "memory env 'm'")
    assert guard.connects == []


# Item 8: one rule for keys over plain http, one reading of "this machine" ---------------------

LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "127.1",
    "0x7f.0.0.1",
    "2130706433",
    "127.9.9.9",
    "LOCALHOST",
    "[::1]",
    "[::ffff:127.0.0.1]",
]
OTHER_MACHINES = ["10.0.0.7", "10.7", "0xa.0.0.7", "167772167", "[::ffff:10.0.0.7]", "x.io"]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS + OTHER_MACHINES)
def test_base_url_and_reload_endpoint_judge_every_spelling_of_a_host_alike(host):
    local = host in LOOPBACK_SPELLINGS
    url = f"http://{host}:8000"
    for server in (
        {"base_url": f"{url}/v1"},
        {"base_url": "https://ok.example/v1", "reload_endpoint": f"{url}/reload"},
    ):
        settings_ = {"model": "m", "api_key_env": "K", **server}
        if local:
            ServerConfig.model_validate(settings_)
        else:
            with pytest.raises(ValueError, match="unencrypted"):
                ServerConfig.model_validate(settings_)
            ServerConfig.model_validate({**settings_, "allow_insecure_http": True})
    assert Endpoint.parse(url).loopback is local


def test_a_key_never_goes_to_a_url_the_rule_refuses_even_when_a_caller_builds_it(
    tmp_path, monkeypatch
):
    from honed.models.chat import ChatClient, ChatModelConfig

    monkeypatch.setenv("HONED_TEST_KEY", "sk-test-12345678")
    client = ChatClient(
        ChatModelConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="HONED_TEST_KEY")
    )
    with watching(tmp_path) as guard:
        with pytest.raises(HonedError, match="unencrypted"):
            client.post(Endpoint.parse("http://10.0.0.7/reload"), {})
        with pytest.raises(TypeError, match="Endpoint"):
            client.post("http://127.0.0.1:9/reload", {})  # type: ignore[arg-type]
    client.close()
    assert guard.connects == []


# Item 9: YAML is data ------------------------------------------------------------------------


def _alias_bomb() -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 40):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("as_run", [False, True])
def test_a_nested_alias_bomb_is_refused_in_a_moment_and_little_memory(tmp_path, as_run):
    from honed.runs.trust import load_run_config

    bomb = _alias_bomb()
    assert 2_000 < len(bomb) < 3_000
    path = tmp_path / "config.yaml"
    path.write_text(bomb)
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(HonedError, match="once its aliases are expanded"):
        if as_run:
            load_run_config(Config, path, [], trust=False)
        else:
            load_config(path)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 2.0 and peak < 20 * 2**20


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("seed: !!binary MQ==\n", "tag:yaml.org,2002:binary"),
        ("seed: !!python/int 1\n", "tag:yaml.org,2002:python/int"),
        ("run_dir: !!python/object/apply:os.system ['true']\n", "python/object/apply"),
        ("run_dir: !!timestamp 2024-01-01\n", "tag:yaml.org,2002:timestamp"),
        ("run_dir: !custom x\n", "'!custom'"),
        ("envs: &e [{name: a, args: {x: *e}}]\n", "refers to the structure that holds it"),
        ("run_dir: " + "[" * 100 + "]" * 100 + "\n", "nested more than"),
    ],
)
def test_only_plain_core_schema_data_is_read(tmp_path, text, refused):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(HonedError, match=refused.replace("[", r"\[")):
        load_config(path)


def test_dates_and_merge_keys_stay_plain_text(tmp_path):
    from honed.yaml_data import load_yaml

    data = load_yaml("a: 2024-01-01\nb: {<<: {c: 1}}\n", "x")
    assert data == {"a": "2024-01-01", "b": {"<<": {"c": 1}}}


# Item 10: no working directory on sys.path ---------------------------------------------------


def test_building_environments_puts_no_directory_on_the_path(tmp_path, monkeypatch):
    """Built-in environments and rewards import nothing from the working directory, and
    leave it off `sys.path`: a missing optional dependency cannot be supplied there."""
    from honed.envs.registry import build_envs

    (tmp_path / "honed_absent_dependency.py").write_text("raise SystemExit('ran')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    config = write_config(tmp_path / "configs")
    build_envs(load_config(config).envs, seed=0)
    assert str(tmp_path) not in sys.path and "" not in sys.path
    assert importlib.util.find_spec("honed_absent_dependency") is None


def test_python_m_honed_does_not_import_from_the_working_directory(tmp_path):
    """`python -m` puts the working directory first on the path; a `yaml.py` there (any
    dependency imported after start-up) must not run."""
    marker = tmp_path / "RAN"
    (tmp_path / "yaml.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "honed", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert not marker.exists()


# Item 11: the smaller ones -------------------------------------------------------------------


@pytest.mark.parametrize(
    "state",
    [
        {"step": 1},
        {"step": 1, "optimizer": "x", "sampler": {}, "reward_norm": {}, "rng": {}},
        {"step": 1, "optimizer": {}, "sampler": [], "reward_norm": 3, "rng": None},
    ],
)
def test_a_malformed_plain_data_trainer_state_is_one_line_and_exit_2(run, capsys, state):
    import torch

    [checkpoint] = (run / "checkpoints").glob("step_*")
    torch.save(state, checkpoint / "trainer_state.pt")
    config = write_config(run.parent / "cfg", name="config.yaml")
    args = ["train", str(config), "--quiet", "--run-dir", str(run), "--resume"]
    capsys.readouterr()
    assert main([*args, "-o", "trainer.max_steps=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trainer state cannot be restored" in err[0], err


@pytest.mark.parametrize(
    "damage",
    [
        lambda state: state.pop("sampler"),
        lambda state: state.update(current_scores=3),
        lambda state: state.update(scheduler=[]),
    ],
    ids=["a part missing", "scores not a mapping", "scheduler of the wrong shape"],
)
def test_a_malformed_skills_state_is_one_line_and_exit_2(tmp_path, skills_base, capsys, damage):
    import json

    from run_trees import copy_run

    config, base = skills_base
    run = copy_run(base, tmp_path / "run")
    state = json.loads((run / "state.json").read_text())
    damage(state)
    (run / "state.json").write_text(json.dumps(state))
    capsys.readouterr()
    args = ["skills", "train", str(config), "--quiet", "--run-dir", str(run), "--resume"]
    assert main([*args, "-o", "train.max_steps=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "skill loop's state cannot be restored" in err[0], err


def test_allow_insecure_http_on_distributed_server_reaches_its_clients(monkeypatch):
    from honed.distributed.server import server_clients

    monkeypatch.setenv("HONED_TEST_KEY", "sk-test-12345678")
    server = ServerConfig(
        base_url="http://10.0.0.7:8000/v1",
        model="m",
        api_key_env="HONED_TEST_KEY",
        allow_insecure_http=True,
    )
    [client] = server_clients(server)
    assert client.config.allow_insecure_http
    client.close()


class _Redirect(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(302)
        self.send_header("Location", "http://10.0.0.7/v1/models")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_check_does_not_take_a_redirect_for_a_healthy_server():
    from honed.models.chat import ChatClient, ChatModelConfig

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        client = ChatClient(ChatModelConfig(base_url=url, model="m"))
        with client, pytest.raises(HonedError, match=r"redirect \(HTTP 302\)"):
            client.check()
    finally:
        server.shutdown()


def test_json_repair_reads_at_most_its_budget_of_a_whole_reply(monkeypatch):
    """A reply of many broken spans costs what one span does: json_repair is handed at most
    `MAX_REPAIR_CHARS` characters of it in all (a cap per span let 8 spans cost 8 times)."""
    import json_repair

    from honed.envs.memory.parsing import parse_calls
    from honed.envs.multiturn.toolcalls import parse_tool_calls
    from honed.skills.edits import decode_json
    from honed.text import MAX_REPAIR_CHARS

    handed: list[int] = []
    real = json_repair.loads

    def counting(text: str, *args, **kwargs):
        handed.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(json_repair, "loads", counting)
    span = "{" + '{"a"' * 1_990 + "}"  # 7,962 characters json_repair takes seconds over
    tiny = "{'name': 'f', 'arguments': {}}"
    replies = [
        lambda: parse_tool_calls(
            "".join(f"<tool_call>{s}</tool_call>" for s in [span] * 8), "hermes"
        ),
        lambda: parse_calls(" ".join([tiny] * 300)),
        lambda: decode_json(span * 8),
    ]
    for reply in replies:
        handed.clear()
        reply()
        assert sum(handed) <= MAX_REPAIR_CHARS, handed


# The property: hostile variants of every import and endpoint field --------------------------

# Where a config names code or a host, by dotted path in a config's data; `{i}` is an import
# slot, `{e}` an endpoint slot. Every field of either type in the schema must be here
# (`test_every_import_and_endpoint_field_has_a_slot`).
GRPO_SLOTS = {
    "envs.type": ("import", lambda v: {"envs": [{"name": "x", "type": v}]}),
    "envs.args.reward": (
        "import",
        lambda v: {
            "envs": [{"name": "x", "type": "dataset", "args": {"path": "d.jsonl", "reward": v}}]
        },
    ),
    "envs.args.reward.function": (
        "import",
        lambda v: {
            "envs": [
                {
                    "name": "x",
                    "type": "dataset",
                    "args": {"path": "d.jsonl", "reward": [{"function": v}]},
                }
            ]
        },
    ),
    "envs.args.reward.llm_judge.base_url": (
        "endpoint",
        lambda v: {
            "envs": [
                {
                    "name": "x",
                    "type": "dataset",
                    "args": {
                        "path": "d.jsonl",
                        "reward": {"type": "llm_judge", "base_url": v, "model": "m", "rubric": "r"},
                    },
                }
            ]
        },
    ),
    "envs.args.tools": (
        "import",
        lambda v: {
            "envs": [{"name": "x", "type": "tools", "args": {"path": "d.jsonl", "tools": [v]}}]
        },
    ),
    "envs.args.chat.base_url": (
        "endpoint",
        lambda v: {
            "envs": [
                {
                    "name": "x",
                    "type": "memory",
                    "args": {"reader": "llm", "chat": {"base_url": v, "model": "m"}},
                }
            ]
        },
    ),
    "distributed.server.base_url": (
        "endpoint",
        lambda v: {"distributed": {"backend": "server", "server": {"base_url": v, "model": "m"}}},
    ),
    "distributed.server.reload_endpoint": (
        "endpoint",
        lambda v: {
            "distributed": {
                "backend": "server",
                "server": {"base_url": "https://ok.example/v1", "model": "m", "reload_endpoint": v},
            }
        },
    ),
    "distributed.server.weight_sync": (
        "import",
        lambda v: {
            "distributed": {
                "backend": "server",
                "server": {"base_url": "https://ok.example/v1", "model": "m", "weight_sync": v},
            }
        },
    ),
    "distributed.api_url": (
        "endpoint",
        lambda v: {"distributed": {"backend": "atropos", "api_url": v}},
    ),
}
SKILLS_SLOTS = {"target.base_url", "reflector.base_url"}


def _typed_fields(model, prefix: str = "") -> set[str]:
    """Dotted paths of the fields whose type holds `Endpoint` or `ImportSpec`, and the two
    fields that are a name or an import spec (`type`, `weight_sync`)."""
    import typing

    from pydantic import BaseModel

    found = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        args = {info.annotation, *typing.get_args(info.annotation)}
        args |= {a for arg in list(args) for a in typing.get_args(arg)}
        if args & {Endpoint, ImportSpec} or path in ("envs.type", "distributed.server.weight_sync"):
            found.add(path)
        for arg in args:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                found |= _typed_fields(arg, f"{path}.")
    return found


def test_every_import_and_endpoint_field_has_a_slot():
    from honed.skills.config import SkillsConfig

    grpo = {s for s in GRPO_SLOTS if not s.startswith("envs.args")}
    assert _typed_fields(Config) == grpo
    skills = _typed_fields(SkillsConfig)
    assert skills >= SKILLS_SLOTS and skills - SKILLS_SLOTS <= {"envs.type"} | {
        s for s in skills if s.startswith("optimizer")
    }


def _variants(kind: str, run: Path) -> st.SearchStrategy[str]:
    """A value for a slot, as YAML text: a real import or host, spelled with hostility."""
    if kind == "import":
        bases = st.sampled_from(
            [f"{run}/evil.py:Env", "evil:Env", "evil.sub:Env", f"{run}/evil.PY:Env"]
        )
    else:
        bases = st.sampled_from(
            [
                "http://127.0.0.1:{port}/v1",
                "http://127.1:{port}/v1",
                "HTTP://LocalHost:{port}",
                "http://[::ffff:127.0.0.1]:{port}/v1",
                "http://2130706433:{port}/v1",
            ]
        )
    spaces = st.sampled_from(["", " ", "\t", "\n", "\u00a0", "\u2003", "\u200b"])
    unicode = st.sampled_from(
        [("", ""), (":", "\uff1a"), (".", "\u3002"), ("e", "\u0435"), ("/", "\u2215")]
    )
    percent = st.sampled_from([("", ""), ("1", "%31"), (".", "%2e"), ("v", "%76")])
    case = st.sampled_from(["as is", "upper", "swap"])

    @st.composite
    def text(draw) -> str:
        value = draw(bases).format(port=9)
        old, new = draw(unicode)
        if old:
            value = value.replace(old, new, 1)
        old, new = draw(percent)
        if old:
            value = value.replace(old, new, 1)
        how = draw(case)
        value = value.upper() if how == "upper" else value.swapcase() if how == "swap" else value
        return draw(spaces) + value + draw(spaces)

    return text()


def _render(value: str, form: str) -> str:
    """`value` as YAML: quoted, tagged, as bytes, or in a list (nesting)."""
    quoted = yaml.safe_dump(value, default_style='"', width=10_000).strip()
    if form == "binary":
        return "!!binary " + base64.b64encode(value.encode()).decode()
    if form == "str tag":
        return "!!str " + quoted
    if form == "python tag":
        return "!!python/str " + quoted
    if form == "list":
        return f"[{quoted}]"
    return quoted


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_run_config_with_hostile_imports_and_hosts_is_refused_or_reaches_nothing(
    trained, tmp_path_factory, capsys, data
):
    """Any config a run may hold, with a hostile variant in any import or endpoint field,
    reused through an alias or not: `honed eval RUN` either refuses it with one line and exit
    2, naming the import or host when the value is one, or imports and contacts nothing."""
    run = tmp_path_factory.mktemp("prop") / "run"
    shutil.copytree(trained, run, ignore=shutil.ignore_patterns("eval"))
    marker = _evil(run)
    (run / "evil").mkdir()
    (run / "evil" / "__init__.py").write_text((run / "evil.py").read_text())
    (run / "evil" / "sub.py").write_text((run / "evil.py").read_text())
    slot = data.draw(st.sampled_from(sorted(GRPO_SLOTS)))
    kind, place = GRPO_SLOTS[slot]
    value = data.draw(_variants(kind, run))
    form = data.draw(st.sampled_from(["plain", "binary", "str tag", "python tag", "list"]))
    aliased = data.draw(st.booleans())
    base = yaml.safe_load((run / "config.yaml").read_text())
    merged = {**base, **{k: v for k, v in place("@SLOT@").items() if k != "envs"}}
    merged["envs"] = base["envs"] + place("@SLOT@").get("envs", [])
    text = yaml.safe_dump(merged, sort_keys=False)
    rendered = _render(value, form)
    if aliased:  # anchored on `run_dir` (a text field `honed eval RUN` does not use), used later
        text = re.sub(r"(?m)^run_dir: .*$", lambda _: f"run_dir: &v {rendered}", text, count=1)
        rendered = "*v"
    text = text.replace("'@SLOT@'", rendered)
    (run / "config.yaml").write_text(text)

    watch = Guard(root=str(run))
    _ARMED.append(watch)
    try:
        capsys.readouterr()
        code = main(["eval", str(run), "--quiet", "--num-items", "1"])
    finally:
        _ARMED.remove(watch)
    err = capsys.readouterr().err.strip().splitlines()
    assert not marker.exists() and watch.code_reads == [] and watch.connects == []
    assert code == 2 and len(err) == 1, (code, err)
    parser = ImportSpec.parse if kind == "import" else Endpoint.parse
    try:
        parsed = parser(value)
    except ValueError:
        return
    if form in ("plain", "str tag"):  # a value that is an import or a host is named
        assert "--trust-run-config" in err[0] and str(parsed) in err[0], err


def test_the_walk_finds_every_parsed_value_once_however_often_it_is_shared():
    shared = {"reward": "m:f", "chat": {"base_url": "http://127.0.0.1:9/v1"}}
    config = Config.model_validate(
        {"envs": [{"name": f"e{i}", "type": "dataset", "args": shared} for i in range(50)]}
    )
    imports, endpoints = reached(config)
    assert [str(i) for i in imports] == ["m:f"]
    assert [str(e) for e in endpoints] == ["http://127.0.0.1:9/v1"]
