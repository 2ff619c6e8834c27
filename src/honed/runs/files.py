"""Every read, write and delete honed makes in a run directory goes through this module.

A run directory is something people share, and whoever made it chose its names and links. Three
rules keep honed from reaching outside a run whatever it holds:

- **No link is followed below a run's root.** `confined` checks each component of a path
  under the root with `lstat` and refuses a symbolic link there (one line naming it, exit code
  2); files are then opened with `O_NOFOLLOW` (`no_follow`, an `opener` for `open`), so the
  last component is checked again by the kernel as it is opened. Checkpoints are checked whole
  (`check_tree`) before a loader that takes a folder (transformers, safetensors) reads them.
- **Temporary files have names nobody can plant.** Every atomic write creates its temporary
  file beside the target with `O_CREAT | O_EXCL | O_NOFOLLOW` under a random name (a name
  that exists, a link included, is never opened: another is drawn), writes through that file
  descriptor, and renames it over the target with `os.replace`, which replaces a name and
  never writes through it.
- **honed touches only what it made.** A run's `honed-run.jsonl` (`Manifest`) lists the files
  and folders honed wrote there; `honed.runs.rundir.RunDir` writes over or deletes only what
  is on it, and refuses a non-empty folder that holds no such list.

The threat this answers is a run directory (or a checkpoint) written by someone else: its
files, names and links are theirs. It does not answer a process of theirs changing the
directory on this machine while honed works in it. `O_NOFOLLOW` is POSIX: on Windows links are
checked with `lstat` alone.

Files and folders are created with the permissions every other tool's output gets, 0666 and
0777 less the user's umask (0644 and 0755 under umask 022), not `tempfile`'s private 0600 and
0700: a run directory is meant to be read by the team, its viewer and its CI.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from honed.errors import HonedError

MANIFEST = "honed-run.jsonl"
MANIFEST_FORMAT = 1
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# `.NAME.tmp-<12 hex>` and `.NAME.old-<12 hex>`: the names `atomic_write` and
# `atomic_write_dir` draw beside NAME
_TEMPORARY = re.compile(r"^\.(.+)\.(?:tmp|old)-[0-9a-f]{12}$")


def _link_error(path: Path | str, where: str) -> HonedError:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return HonedError(
        f"{path} is a symbolic link{target}; honed does not follow links {where}: replace it "
        "with the file itself, or remove it"
    )


def no_follow(path: str | os.PathLike[str], flags: int) -> int:
    """An `opener` for `open()`: the file, never what a link in its place points to."""
    try:
        return os.open(path, flags | _NOFOLLOW | _CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_error(path, "in a run directory") from None
        raise


def read_bytes(path: str | Path) -> bytes:
    with open(path, "rb", opener=no_follow) as fh:
        return fh.read()


def read_text(path: str | Path) -> str:
    """A file's text (UTF-8), refused when the file is a symbolic link."""
    return read_bytes(path).decode("utf-8")


def confined(root: str | Path, path: str | Path) -> Path:
    """`path` itself, once it is known to lie under `root` with no symbolic link on the way.

    `path` must be `root` joined with relative parts (no `..`). Each component that exists is
    checked with `lstat`; one that does not exist yet ends the check (honed creates it, as a
    folder or a file, never as a link).
    """
    root, path = Path(root), Path(path)
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise HonedError(f"{path} is not inside the run directory {root}") from None
    if ".." in rel.parts:
        raise HonedError(f"{path} climbs out of the run directory {root} ('..')")
    here = root
    for part in rel.parts:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except (FileNotFoundError, NotADirectoryError):
            break
        if stat.S_ISLNK(mode):
            raise _link_error(here, f"inside a run directory ({root})")
    return path


def check_tree(folder: str | Path, what: str = "a checkpoint") -> None:
    """Refuse a folder that holds a symbolic link anywhere inside it (one line, exit code 2):
    the loaders that read a whole folder (transformers, safetensors, the tokenizer) would follow
    it, and a save would copy what it points to into the next checkpoint."""
    folder = Path(folder)
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_symlink():
                raise _link_error(entry.path, f"inside {what} ({folder})")
            if entry.is_dir(follow_symlinks=False):
                check_tree(entry.path, what)


def run_file_argument(path: str | Path) -> Path:
    """A file a user names on the command line that may lie inside someone's run (`--skill
    runs/x/best_skill.md`): when a folder on its way holds a run (`honed-run.jsonl` or
    `config.yaml`), nothing below that folder may be a link; the file itself never may."""
    path = Path(path)
    absolute = Path(os.path.abspath(path))
    for folder in absolute.parents:
        if (folder / MANIFEST).is_file() or (folder / "config.yaml").is_file():
            confined(folder, absolute)
            break
    if os.path.islink(absolute):
        raise _link_error(path, "named on the command line")
    return path


# ------------------------------------------------------------------ writes


def _temporary(folder: Path, prefix: str, create: Callable[[Path], int | None]) -> Path:
    """A new, unused path in `folder` made by `create` (which fails if anything, a link
    included, is there already)."""
    while True:
        path = folder / f"{prefix}{secrets.token_hex(6)}"
        try:
            create(path)
        except FileExistsError:
            continue
        return path


def _new_dir(path: Path) -> None:
    os.mkdir(path, 0o777)


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write `path` atomically with `write(fh)`; creates parent folders.

    The bytes go to a new temporary file in the same directory (created with `O_EXCL` under a
    random name), are flushed to disk, then the file is renamed over the final name, so a run
    killed mid-write leaves the old file or the new one, never a truncated file that
    `--resume` would read back; and a link at the final name is replaced, never written
    through.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fds: list[int] = []

    def create(tmp: Path) -> None:
        fds.append(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666))

    tmp = _temporary(path.parent, f".{path.name}.tmp-", create)
    try:
        with os.fdopen(fds[0], "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8, line endings as given) to `path` atomically (`atomic_write`)."""
    data = text.encode("utf-8")
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def append_text(path: str | Path, text: str) -> None:
    """Append to a log (creating it), never through a link in its place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8", opener=no_follow) as fh:
        fh.write(text)
        fh.flush()


def atomic_write_dir(path: str | Path, fill: Callable[[Path], None]) -> None:
    """Build a directory under a new temporary name beside `path`, then rename it into place
    (an older one is first renamed to another new name, then removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path.parent, f".{path.name}.tmp-", _new_dir)
    try:
        fill(tmp)
        if os.path.lexists(path):
            old = _temporary(path.parent, f".{path.name}.old-", _new_dir)
            os.replace(path, old)  # a folder renamed over the new, empty one
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def copy_file(source: str | Path, target: str | Path) -> None:
    """Copy a regular file's bytes (never through a link at either end) with its times."""
    with open(source, "rb", opener=no_follow) as src:
        info = os.fstat(src.fileno())
        with open(target, "xb", opener=no_follow) as dst:
            shutil.copyfileobj(src, dst)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def link_tree(source: str | Path, target: str | Path) -> None:
    """Fill the folder `target` with the files of the folder `source` as hard links (copies
    where the file system has none), folders made anew, never through a link (one inside
    `source` is refused). A checkpoint's files are written once and never in place, so two
    checkpoints may share them."""
    source, target = Path(source), Path(target)
    with os.scandir(source) as entries:
        for entry in entries:
            if entry.is_symlink():
                raise _link_error(entry.path, f"inside {source}")
            there = target / entry.name
            if entry.is_dir(follow_symlinks=False):
                there.mkdir()
                link_tree(entry.path, there)
                continue
            try:
                os.link(entry.path, there, follow_symlinks=False)
            except OSError:
                copy_file(entry.path, there)


def remove(path: str | Path) -> None:
    """Delete a file, or a folder with everything in it; a link goes itself, never its target
    (`shutil.rmtree` works through folder descriptors and does not follow links)."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        path.unlink()


# ------------------------------------------------------------------ what honed wrote


class Manifest:
    """`honed-run.jsonl`: what honed wrote in one run directory, one line per entry.

    The first line marks the folder as a honed run (`{"honed_run": 1}`). Each further line is
    `{"file": path}` (a file or a folder honed made by name, its content listed line by line)
    or `{"tree": path}` (a folder honed built whole, or a library wrote for it: a checkpoint,
    a step's record, TensorBoard's logs), paths relative to the run in POSIX form. An entry
    is written *before* its file, so a crash leaves nothing of honed's unlisted; an entry whose
    file is gone is harmless. The log only grows (one short line per new name).
    """

    def __init__(self, root: Path, files: Iterable[str] = (), trees: Iterable[str] = ()) -> None:
        self.root = root
        self.files, self.trees = set(files), set(trees)
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self.root / MANIFEST

    @classmethod
    def load(cls, root: Path) -> Manifest | None:
        """The run's manifest; None when the folder has none (not a honed run, or one written
        before honed kept it)."""
        path = confined(root, root / MANIFEST)
        try:
            lines = read_text(path).splitlines()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise HonedError(f"{path}: cannot read the list of what honed wrote ({exc})") from None
        manifest = cls(root)
        for line in lines[1:]:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            if isinstance(entry, dict) and isinstance(entry.get("file"), str):
                manifest.files.add(entry["file"])
            elif isinstance(entry, dict) and isinstance(entry.get("tree"), str):
                manifest.trees.add(entry["tree"])
        return manifest

    def save(self) -> None:
        """Write the whole list (a new run, or one adopted from an older honed)."""
        lines = [{"honed_run": MANIFEST_FORMAT}]
        lines += [{"file": p} for p in sorted(self.files)]
        lines += [{"tree": p} for p in sorted(self.trees)]
        atomic_write_text(self.path, "".join(json.dumps(line) + "\n" for line in lines))

    def owns(self, rel: str) -> bool:
        """Whether honed wrote `rel`: a listed file or folder, anything in a listed tree, or
        the temporary name of a listed one (`.NAME.tmp-*`, `.NAME.old-*`: left by a crash)."""
        if rel in self.files or rel in self.trees or self.in_tree(rel):
            return True
        folder, _, name = rel.rpartition("/")
        temporary = _TEMPORARY.match(name)
        return temporary is not None and self.owns(
            f"{folder}/{temporary.group(1)}" if folder else temporary.group(1)
        )

    def in_tree(self, rel: str) -> bool:
        parts = rel.split("/")
        return any("/".join(parts[:i]) in self.trees for i in range(1, len(parts)))

    def record(self, rel: str, tree: bool = False) -> None:
        """List `rel` (and the folders on its way, which honed creates) before it is written."""
        parts = rel.split("/")
        new = [("file", "/".join(parts[:i])) for i in range(1, len(parts))]
        new.append(("tree" if tree else "file", rel))
        with self._lock:
            lines = []
            for kind, name in new:
                listed = name in self.trees or (kind == "file" and name in self.files)
                if not (listed or self.in_tree(name)):
                    (self.trees if kind == "tree" else self.files).add(name)
                    lines.append(json.dumps({kind: name}) + "\n")
            if lines:
                append_text(self.path, "".join(lines))
