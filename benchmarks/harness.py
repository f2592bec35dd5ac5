"""What every benchmark shares: its options (the results folder, repeats, comma-separated sizes),
timing (a warm-up, then contenders taking turns; the best of N; setup steps on a stopwatch), results
tables in Markdown, the results file and line plots."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Key = TypeVar("Key", bound=Hashable)
Setting = TypeVar("Setting", bound=Hashable)


def arguments(description: str | None, repeat: int = 2) -> argparse.ArgumentParser:
    """A benchmark's parser with the options every benchmark takes: ``--out`` (the results folder)
    and ``--repeat`` (counted runs after the warm-up, default ``repeat``)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results", help="the results folder (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=repeat,
                        help="counted runs of each contender after one warm-up (default: %(default)s)")
    return parser


def start(out: str) -> Path:
    """Logs at warnings only, and the results folder made up front, so that a bad ``--out`` fails
    before minutes of setup; returns the folder."""
    logging.basicConfig(level=logging.WARNING)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def comma_list(text: str, parse: Callable[[str], Any] = str) -> list[Any]:
    """The items of a comma-separated option (``day,month,10x``; ``1024,4096``), blanks dropped,
    each through ``parse``."""
    return [parse(item.strip()) for item in text.split(",") if item.strip()]


def times(size: str, suffix: str = "x") -> float | None:
    """N of a size written as N times something (``10x``, ``0.05x``; ``3x-day`` with the suffix
    ``x-day``) when N is a positive number, else None."""
    if not size.endswith(suffix):
        return None
    try:
        factor = float(size[: -len(suffix)])
    except ValueError:
        return None
    return factor if factor > 0 else None


def seconds(action: Callable[[], Any], sync: Callable[[], Any] | None = None) -> float:
    """Seconds of one run of ``action``; ``sync`` runs inside the clock after it (waiting for a
    GPU, whose work is asynchronous: ``torch.cuda.synchronize``)."""
    started = time.perf_counter()
    action()
    if sync:
        sync()
    return time.perf_counter() - started


class Turns(Generic[Key]):
    """Contenders taking turns: each runs once untimed (imports, JIT, caches, Python workers), then
    ``repeat`` rounds in which every contender runs once, so that drift on a shared machine hits all
    of them alike. A run returns what it measured (:func:`seconds`, or a richer timing a contender
    takes itself); a subclass changes how one run is made (re-warming, say) in :meth:`warm_up` and
    :meth:`run`."""

    def __init__(self, repeat: int) -> None:
        self.repeat = repeat

    def warm_up(self, key: Key, action: Callable[[], Any]) -> None:
        """The untimed run before the counted ones."""
        action()

    def run(self, key: Key, action: Callable[[], T]) -> T:
        """One counted run: what ``action`` measured."""
        return action()

    def measure(self, actions: Mapping[Key, Callable[[], T]]) -> dict[Key, list[T]]:
        """Every counted run of each action, in turns after the warm-ups."""
        runs = self.measure_settings(actions, {None: lambda: None})
        return {key: runs[None, key] for key in actions}

    def measure_settings(
        self, actions: Mapping[Key, Callable[[], T]], settings: Mapping[Setting, Callable[[], Any]],
    ) -> dict[tuple[Setting, Key], list[T]]:
        """Every counted run per (setting, action): the settings take turns too, each applied (a
        session conf, say) before its round of the actions; the warm-ups run under the first."""
        next(iter(settings.values()))()
        for key, action in actions.items():
            self.warm_up(key, action)
        runs: dict[tuple[Setting, Key], list[T]] = {(s, key): [] for s in settings for key in actions}
        for _ in range(self.repeat):
            for setting, apply in settings.items():
                apply()
                for key, action in actions.items():
                    runs[setting, key].append(self.run(key, action))
        return runs


def best_of(repeat: int, action: Callable[[], Any], sync: Callable[[], Any] | None = None) -> float:
    """Seconds of the fastest of ``repeat`` runs of ``action`` after one untimed warm-up; ``sync`` as
    in :func:`seconds`."""
    return min(Turns(max(1, repeat)).measure({0: lambda: seconds(action, sync)})[0])


@contextlib.contextmanager
def stopwatch(into: dict[str, float], key: str) -> Iterator[None]:
    """The seconds of the block, as ``into[key]`` (a benchmark's setup steps, reported apart)."""
    started = time.perf_counter()
    yield
    into[key] = time.perf_counter() - started


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table: ``columns`` as the header, each row's cells as text."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(out: Path, name: str, payload: dict[str, Any]) -> Path:
    """Write a benchmark's results as ``<out>/<name>.json``; returns the path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path


@dataclasses.dataclass(frozen=True)
class Line:
    """One series of a line plot: a marker at every point, solid or dashed."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    dashed: bool = False


def line_plot(
    path: Path, lines: Sequence[Line], *, xlabel: str, ylabel: str, title: str, log: bool = False,
    levels: Mapping[str, float] | None = None,
) -> Path:
    """Write the lines as a PNG (matplotlib's Figure, no pyplot or display), with a horizontal line
    per ``levels`` entry (a bound: label and height), log-log axes when ``log``; returns the path."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()
    for line in lines:
        ax.plot(line.x, line.y, marker="o", linestyle="--" if line.dashed else "-", label=line.label)
    for label, height in (levels or {}).items():
        ax.axhline(height, color="black", linewidth=1, label=label)
    if log:
        ax.set(xscale="log", yscale="log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


@dataclasses.dataclass(frozen=True)
class Fit:
    """``t(N) = a + N / b`` over a contender's sizes: the fixed cost ``a`` (seconds) and the
    throughput ``b`` (rows/s; None when the time does not grow with N)."""

    a: float
    b: float | None

    def seconds(self, rows: float) -> float:
        """The fitted time at ``rows``."""
        return self.a + (rows / self.b if self.b else 0.0)


def fit_fixed_and_rate(rows: Sequence[float], seconds: Sequence[float]) -> Fit:
    """Least squares of ``t = a + N / b`` over the points (one point: all of it counts as throughput)."""
    import numpy as np

    if len(rows) < 2:
        return Fit(0.0, rows[0] / seconds[0] if rows and seconds[0] > 0 else None)
    slope, intercept = np.polyfit(np.asarray(rows, dtype=float), np.asarray(seconds, dtype=float), 1)
    return Fit(float(intercept), float(1.0 / slope) if slope > 0 else None)
