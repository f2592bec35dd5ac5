"""The Model health page in headless Chromium, as a PNG: docs/model-health.png (`make health-screenshot`).

``python scripts/health_screenshot.py --help`` lists its options.

Writes a synthetic lake of ``--days`` days (:func:`benchmarks.health.synthetic_lake`: a champion that
decays and is replaced after a retraining, two challengers, a drift episode, a day without outcomes,
days awaiting their outcomes), renders the page from it exactly as the plugin's app does, and has
Chromium (``scripts/system_packages.sh`` installs it) take the screenshot. The deployed stack's test
takes the same page through Airflow's UI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SIZE = "1100,1680"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", default=str(REPO / "docs" / "model-health.png"),
                        help="the PNG to write (default: docs/model-health.png)")
    parser.add_argument("--days", type=int, default=60,
                        help="days of the synthetic lake the page shows (default: %(default)s)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium",
                        help="the Chromium to run headless (default: %(default)s)")
    args = parser.parse_args(argv)
    if not Path(args.chromium).exists():
        sys.exit(f"no Chromium at {args.chromium}: install it with scripts/system_packages.sh, or pass --chromium PATH")

    os.environ.setdefault("MLFLOW_UI_URL", "http://127.0.0.1:5000")  # the embedded default: MLflow runs are links
    from benchmarks.health import synthetic_lake
    from jobs.lake.layout import Lake
    from orchestration.health.page import render
    from orchestration.health.view import DocumentCache, model_health

    with tempfile.TemporaryDirectory(prefix="health-screenshot-") as folder:
        lake = Lake(f"{folder}/lake")
        synthetic_lake(lake, dt.date(2013, 3, 1), args.days)
        page = Path(folder) / "model-health.html"
        page.write_text(render(model_health(lake, cache=DocumentCache())))
        out = Path(args.out).resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={folder}/chromium", f"--window-size={SIZE}", f"--screenshot={out}", page.as_uri()],
            capture_output=True, text=True, timeout=90)
        if done.returncode != 0 or not out.exists():
            sys.exit(f"Chromium did not write {out} (exit code {done.returncode}): {done.stderr[-2000:]}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
