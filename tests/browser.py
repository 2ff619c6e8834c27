"""A real browser for the tests of `honed view`: Debian's Chromium driven by Playwright.

Tests that need it skip, saying how to enable them, when Chromium or Playwright is missing;
with HONED_REQUIRE_BROWSER=1 (set by .ci/run, which installs Chromium) they fail instead.
Playwright's own browser download is never used: it launches the system's Chromium.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOW = (
    "browser tests need Chromium and Playwright: apt-get install chromium (or set "
    "HONED_CHROMIUM to a Chromium binary) and pip install playwright (in the dev extra); "
    "HONED_REQUIRE_BROWSER=1 makes their absence a failure"
)


def chromium_path() -> str | None:
    named = os.environ.get("HONED_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def require_browser() -> str:
    """The Chromium binary, or skip (fail under HONED_REQUIRE_BROWSER=1) saying how to get one."""
    missing = []
    path = chromium_path()
    if path is None:
        missing.append("no Chromium found")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("Playwright is not installed")
    if missing:
        message = f"{'; '.join(missing)}: {HOW}"
        if os.environ.get("HONED_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@contextmanager
def viewer(root: Path) -> Iterator[str]:
    """`honed view ROOT --port 0` in a process of its own (the command a user runs); yields its
    address once it listens."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    src = str(Path(__file__).parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "honed", "view", str(root), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        line = _first_line(proc, timeout=60)
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        assert found, f"honed view said {line!r}"
        yield found.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return out[0] if out else "(nothing)"


@contextmanager
def browser_page(chromium: str, width: int = 1400, height: int = 900):
    """A fresh page in headless Chromium; page errors fail the test that used it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on(
                "console",
                lambda m: errors.append(m.text) if m.type == "error" else None,
            )
            yield page
            assert not errors, errors
        finally:
            browser.close()


# Pixels of a chart's canvas whose colour is near `rgb`: the series drawn, not axes or grid.
COUNT_PIXELS = """([key, rgb]) => {
  const canvas = document.querySelector(`[data-key="${key}"] canvas`);
  if (!canvas) return -1;
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let n = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (data[i + 3] > 200 && Math.abs(data[i] - rgb[0]) < 40 && Math.abs(data[i + 1] - rgb[1]) < 40
        && Math.abs(data[i + 2] - rgb[2]) < 40) n++;
  }
  return n;
}"""
