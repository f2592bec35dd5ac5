"""What every benchmark shares: timing (a warm-up, then the best of N), a results table in
Markdown, and the results file."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def best_of(repeat: int, action: Callable[[], Any], sync: Callable[[], Any] | None = None) -> float:
    """Seconds of the fastest of ``repeat`` runs of ``action``, after one untimed warm-up (imports,
    JIT, caches, Python workers). ``sync`` runs inside the clock after each run: waiting for a GPU
    (``torch.cuda.synchronize``), whose work is asynchronous."""
    action()
    if sync:
        sync()
    times = []
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        action()
        if sync:
            sync()
        times.append(time.perf_counter() - started)
    return min(times)


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
