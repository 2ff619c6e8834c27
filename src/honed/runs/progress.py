"""What a person watching a run sees: a progress bar while it trains, tables when it ends."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


class Reporter:
    def __init__(self, enabled: bool = True, console: Console | None = None) -> None:
        self.enabled = enabled
        self.console = console or Console()

    def note(self, message: str) -> None:
        if self.enabled:
            self.console.print(f"[dim]·[/dim] {message}")

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        with self.console.status(message):
            yield
        self.console.print(f"[dim]·[/dim] {message}: done")

    @contextlib.contextmanager
    def task(self, name: str, total: int, start: int = 0) -> Iterator[Callable[[str], None]]:
        """A progress bar; the yielded callback advances it by one with a status text."""
        if not self.enabled or total <= 0:
            yield lambda text: None
            return
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task(name, total=total, completed=start, info="")
            yield lambda text: progress.update(task, advance=1, info=text)

    def comparison(
        self,
        title: str,
        before: Mapping[str, float],
        after: Mapping[str, float],
        labels: tuple[str, str] = ("initial", "final"),
        baselines: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        """A table of metrics before and after, with the change; `baselines` are further
        columns (label → metrics) shown between the two, for reference."""
        if not self.enabled:
            return
        baselines = baselines or {}
        table = Table(title=title)
        table.add_column("metric")
        table.add_column(labels[0], justify="right")
        for label in baselines:
            table.add_column(label, justify="right")
        table.add_column(labels[1], justify="right")
        table.add_column("change", justify="right")
        for key in sorted(set(before) | set(after), key=_metric_order):
            a, b = before.get(key), after.get(key)
            delta = "" if a is None or b is None else f"{b - a:+.3f}"
            extra = [_fmt(values.get(key)) for values in baselines.values()]
            table.add_row(key, _fmt(a), *extra, _fmt(b), delta)
        self.console.print(table)

    def table(self, title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        """A plain table: a header and rows of any cells (numbers right-aligned, floats to three
        decimals, `None` as a dash for what does not apply)."""
        if not self.enabled:
            return
        table = Table(title=title)
        for i, name in enumerate(header):
            numeric = any(isinstance(row[i], int | float) for row in rows if i < len(row))
            table.add_column(name, justify="right" if numeric else "left")
        for row in rows:
            table.add_row(*(_cell(cell) for cell in row))
        self.console.print(table)

    def values(self, title: str, values: Mapping[str, float]) -> None:
        if not self.enabled:
            return
        table = Table(title=title)
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key in sorted(values, key=_metric_order):
            table.add_row(key, _fmt(values[key]))
        self.console.print(table)


def _cell(value: object) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _metric_order(key: str) -> tuple[int, str]:
    """Headline metrics first, then per-environment details alphabetically."""
    return (0 if "/" not in key else 1, key)
