"""Environment registry: names, user classes, argument checks and their messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from honed.envs import registry
from honed.envs.base import Environment
from honed.envs.dataset import DatasetEnv
from honed.envs.registry import ENVIRONMENTS, build_env, register, resolve
from honed.envs.tasks import AdditionEnv, CountdownEnv, ReverseEnv, SortEnv
from honed.errors import HonedError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = {
    "path": str(REPO / "examples" / "dataset" / "data.jsonl"),
    "reward": str(REPO / "examples" / "dataset" / "reward.py") + ":exact",
}

USER_ENV = '''
from honed.envs.tasks import AdditionEnv


class Doubling(AdditionEnv):
    """Addition with a prompt of its own, to tell it apart."""

    def __init__(self, name, seed=0, *, factor=2, **args):
        super().__init__(name, seed, **args)
        self.factor = factor


class NotAnEnv:
    def __init__(self, name, seed=0):
        self.name = name


not_a_class = 3
'''


@pytest.fixture
def user_file(tmp_path) -> Path:
    path = tmp_path / "my_envs.py"
    path.write_text(USER_ENV)
    return path


@pytest.fixture(autouse=True)
def private_registry(monkeypatch):
    """`register` in one test must not leak into another."""
    monkeypatch.setattr(registry, "ENVIRONMENTS", dict(ENVIRONMENTS))


@pytest.mark.parametrize(
    ("type_name", "cls", "args"),
    [
        ("addition", AdditionEnv, {"levels": [1]}),
        ("reverse", ReverseEnv, {}),
        ("sort", SortEnv, {"test_size": 5}),
        ("countdown", CountdownEnv, {"levels": [2, 3]}),
        ("dataset", DatasetEnv, EXAMPLE),
    ],
)
def test_builtin_environments_build(type_name, cls, args):
    env = build_env(type_name, "mine", seed=4, args=args)
    assert type(env) is cls and env.name == "mine"
    assert isinstance(env, Environment)
    assert env.items("test") and all(item.env == "mine" for item in env.items("test"))


def test_seed_reaches_the_environment():
    a = build_env("addition", "add", seed=1, args={})
    b = build_env("addition", "add", seed=2, args={})
    assert (a.seed, b.seed) == (1, 2)
    assert a.items("test") != b.items("test")


def test_the_builtin_names():
    assert set(ENVIRONMENTS) == {
        "addition",
        "arithmetic",
        "reverse",
        "sort",
        "countdown",
        "dataset",
        "qa",
        "memory",
        "tools",
        "reasoning_gym",
        "verifiers",
    }


def test_unknown_environment_suggests_and_lists():
    with pytest.raises(HonedError) as info:
        build_env("additon", "x", seed=0, args={})
    assert str(info.value) == (
        "unknown environment 'additon' (did you mean 'addition'?); available: "
        "addition, arithmetic, countdown, dataset, memory, qa, reasoning_gym, reverse, sort, tools, "
        "verifiers (or a class as 'module:Class')"
    )


def test_an_unknown_environment_with_a_line_break_is_named_on_one_line():
    """A type name from a config may hold any character; the error is one line (escaped), as
    the CLI promises, with the culprit recognisable."""
    with pytest.raises(HonedError) as info:
        build_env("evil.py\uff1aEnv\n", "x", seed=0, args={})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("unknown environment 'evil.py\uff1aEnv\\n'")


def test_unknown_argument_names_env_argument_and_accepted_ones():
    with pytest.raises(HonedError) as info:
        build_env("addition", "add", seed=0, args={"levls": [1]})
    message = str(info.value)
    assert message.startswith("environment 'add' (addition) got an unknown argument 'levls'")
    assert "(did you mean 'levels'?)" in message
    assert "accepted arguments: levels, train_size, validation_size, test_size, partial_credit" in (
        message
    )


def test_missing_required_argument():
    with pytest.raises(
        HonedError, match="environment 'd' \\(dataset\\) requires the argument 'path'"
    ):
        build_env("dataset", "d", seed=0, args={"reward": EXAMPLE["reward"]})


@pytest.mark.parametrize("arg", ["name", "seed"])
def test_name_and_seed_come_from_the_run(arg):
    with pytest.raises(HonedError, match=f"'{arg}' is set by the run"):
        build_env("addition", "add", seed=0, args={arg: 1})


def test_value_errors_come_from_the_environment_itself():
    with pytest.raises(HonedError, match="environment 'add' \\(AdditionEnv\\): level 40"):
        build_env("addition", "add", seed=0, args={"levels": [40]})


def test_user_class_from_a_file(user_file):
    env = build_env(f"{user_file}:Doubling", "dbl", seed=0, args={"factor": 3, "levels": [1]})
    assert type(env).__name__ == "Doubling" and env.factor == 3 and env.levels == [1]


def test_user_class_with_kwargs_rejecting_an_argument_is_a_honed_error(user_file):
    """A constructor with **args cannot be checked ahead; its TypeError is translated."""
    with pytest.raises(HonedError) as info:
        build_env(f"{user_file}:Doubling", "dbl", seed=0, args={"junk": 1})
    message = str(info.value)
    assert message.startswith("environment 'dbl' (")
    assert "rejected its arguments" in message and "'junk'" in message
    assert message.endswith("accepted arguments: factor")


def test_user_class_from_a_module_next_to_the_config_and_not_from_the_working_directory(
    user_file, tmp_path, monkeypatch
):
    """A module the config names is looked for in the config file's directory (for that import
    only); the working directory is never on the path."""
    from honed.config import load_config
    from honed.envs.registry import build_envs

    config = user_file.parent / "config.yaml"
    config.write_text("envs: [{name: dbl, type: 'my_envs:Doubling'}]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(user_file.parent))])
    path_before = list(sys.path)
    try:
        envs = build_envs(load_config(config).envs, seed=0)
        assert type(envs["dbl"]).__name__ == "Doubling"
        assert sys.path == path_before
    finally:
        sys.modules.pop("my_envs", None)
    monkeypatch.chdir(user_file.parent)
    with pytest.raises(HonedError, match="No module named 'my_envs'"):
        build_env("my_envs:Doubling", "dbl", seed=0, args={})


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("{file}:not_a_class", "names 3, which is not a class"),
        ("{file}:Dubling", "has no attribute 'Dubling' \\(did you mean 'Doubling'\\?\\)"),
        ("{file}:NotAnEnv", "does not implement the Environment protocol: missing items"),
        ("honed_no_such_module:Env", "cannot import environment 'honed_no_such_module:Env'"),
    ],
)
def test_bad_user_classes(user_file, target, message):
    with pytest.raises(HonedError, match=message):
        build_env(target.format(file=user_file), "u", seed=0, args={})


def test_register_a_class_or_a_lazy_target(user_file):
    register("twice", AdditionEnv)
    assert type(build_env("twice", "t", seed=0, args={})) is AdditionEnv
    register("doubling", f"{user_file}:Doubling")
    assert resolve("doubling").__name__ == "Doubling"
    assert "doubling" in registry.ENVIRONMENTS


def test_importing_the_registry_imports_no_environment():
    code = (
        "import sys, honed.envs.registry as r; "
        "print(any(m.startswith(('honed.envs.tasks', 'honed.envs.dataset')) for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO / "src")},
    )
    assert out.stdout.strip() == "False"
