"""Atomic file writes: a reader (or a crash) never sees half a file or half a checkpoint; and
paths confined to a run directory: a run someone shared cannot make honed read, write or delete
anything outside it through a symbolic link.

Files and folders are created with the permissions every other tool's output gets, 0666 and
0777 less the user's umask (0644 and 0755 under umask 022), not `tempfile`'s private 0600 and
0700: a run directory is meant to be read by the team, its viewer and its CI.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from honed.errors import HonedError


def inside(root: str | Path, path: str | Path) -> Path:
    """`path` itself, once every link on the way to it is known to stay inside `root`.

    Links that stay inside the directory are allowed (a user may link a checkpoint to a
    neighbouring step); a link out of it, or `..` that climbs out, is refused before any file
    is touched.
    """
    root, path = Path(root), Path(path)
    base = root.resolve()
    target = path.resolve()
    if target != base and base not in target.parents:
        raise HonedError(
            f"{path} leads outside the run directory {root} (to {target}); honed does not read, "
            "write or delete files outside a run through links: remove the link"
        )
    return path


def _temporary(folder: Path, prefix: str, create: Callable[[Path], None]) -> Path:
    """A new, unused path in `folder` made by `create` (which fails if it exists)."""
    while True:
        path = folder / f"{prefix}{secrets.token_hex(6)}"
        try:
            create(path)
        except FileExistsError:
            continue
        return path


def _new_file(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def _new_dir(path: Path) -> None:
    os.mkdir(path, 0o777)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8, line endings as given) to `path` atomically; creates parent folders.

    The text goes to a temporary file in the same directory, is flushed to disk, then renamed
    over the final name, so a run killed mid-write leaves the old file or the new one, never a
    truncated file that `--resume` would read back.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path.parent, f".{path.name}.tmp-", _new_file)
    try:
        with tmp.open("wb") as fh:
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def atomic_write_dir(path: str | Path, fill: Callable[[Path], None]) -> None:
    """Build a directory under a temporary name beside `path`, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path.parent, f".{path.name}.tmp-", _new_dir)
    try:
        fill(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
