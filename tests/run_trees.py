"""Watching what a command does to files outside a run: content hashes of a sentinel tree
(writes and deletes) and an audit hook on `open` events (reads).

The hook (`sys.addaudithook`, installed once per process) judges every `open` while a
`watching()` block is active: the file it would reach, every link followed (or all but the last
when the open does not follow one: `O_NOFOLLOW`, or `O_CREAT | O_EXCL`). A builtin `open()`
raises its event before it calls its `opener`; when the next event of the same thread is the
opener's `os.open` of the same path, that one is judged instead.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_UNFOLLOWED = os.O_NOFOLLOW


def _reached(path: str, flags: int) -> str:
    path = os.path.abspath(path)
    if flags & _UNFOLLOWED or (flags & os.O_CREAT and flags & os.O_EXCL):
        return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    return os.path.realpath(path)


class OpenWatch:
    """Every file opened under `roots` (real paths) while watching."""

    def __init__(self) -> None:
        self.roots: tuple[str, ...] = ()
        self.opened: list[str] = []
        self._tentative: dict[int, tuple[str, str | None]] = {}

    def _judge(self, path: str, flags: int) -> str | None:
        reached = _reached(path, flags)
        inside = any(reached == r or reached.startswith(r + os.sep) for r in self.roots)
        return reached if inside else None

    def hook(self, event: str, args: tuple) -> None:
        if event != "open" or not self.roots:
            return
        path, mode, flags = args
        if isinstance(path, int):
            return
        path = os.fsdecode(os.fspath(path))
        thread = threading.get_ident()
        earlier = self._tentative.pop(thread, None)
        if earlier is not None and not (mode is None and earlier[0] == path):
            self._commit(earlier[1])  # a builtin open() without an opener: it followed links
        if mode is None:  # os.open: its flags say how it opens
            self._commit(self._judge(path, flags or 0))
        else:
            self._tentative[thread] = (path, self._judge(path, 0))

    def _commit(self, reached: str | None) -> None:
        if reached is not None:
            self.opened.append(reached)

    @contextmanager
    def watching(self, *roots: Path) -> Iterator[list[str]]:
        self.roots = tuple(os.path.realpath(r) for r in roots)
        self.opened = []
        try:
            yield self.opened
        finally:
            for _, reached in self._tentative.values():
                self._commit(reached)
            self._tentative.clear()
            self.roots = ()


WATCH = OpenWatch()
sys.addaudithook(WATCH.hook)


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under `root`, links not followed: a file's content hash, a link's target."""
    found = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(folder, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


SECRET = "PRIVATE KEY: never to be read by honed"


def sentinel_tree(root: Path) -> Path:
    """Files outside every run: private ones, and another project laid out much as a run is
    (a config, a summary, logs, step folders) but never written by honed."""
    (root / "dir" / "sub").mkdir(parents=True)
    (root / "id_rsa").write_text(SECRET)
    (root / "dir" / "notes.md").write_text(SECRET)
    (root / "dir" / "sub" / "deep.txt").write_text(SECRET)
    project = root / "other_project"
    for rel in ("steps/step_0001", "rollouts", "checkpoints/step_1", "skills"):
        (project / rel).mkdir(parents=True)
    (project / "config.yaml").write_text("name: not honed\nseed: 1\n")
    (project / "summary.json").write_text('{"theirs": true}\n')
    (project / "metrics.jsonl").write_text('{"step": 1, "theirs": true}\n')
    (project / "steps" / "step_0001" / "step.json").write_text("{}\n")
    (project / "rollouts" / "step_000001.json").write_text("{}\n")
    (project / "checkpoints" / "step_1" / "trainer_state.pt").write_text(SECRET)
    (project / "skills" / "v0001.md").write_text(SECRET)
    (project / "README.md").write_text(SECRET)
    return root


# ------------------------------------------------------------------ small real runs


def grpo_config(folder: Path) -> Path:
    """A GRPO config whose run takes a second or two: one step, a checkpoint after it."""
    from tiny_run import small_config_data, write_config

    data = small_config_data(folder)
    data["trainer"]["max_steps"] = 1
    data["checkpoint"] = {"every": 1, "keep_last": 2}
    data["eval"] = {"num_items": 2}
    data["envs"][0]["args"].update(train_size=8, test_size=2, validation_size=2)
    return write_config(folder, data)


def skills_config(folder: Path, base_url: str) -> Path:
    """A skills config (`skill_world`) whose run is one step of four items."""
    from skill_world import write_config

    return write_config(
        folder,
        base_url,
        train={"epochs": 2, "steps_per_epoch": 1, "batch_size": 4},
        consolidation={"enabled": False},
    )


def copy_run(base: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(base, to, symlinks=True)
    return to
