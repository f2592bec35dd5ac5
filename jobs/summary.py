"""Print what a scoring run produced: the model that scored it, its metrics, the predictions.

``python -m jobs.summary --help`` lists its options.

Reads the scoring report the score job wrote for the day and the model version's tags in MLflow.
Works on a local lake folder.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from jobs.config import load_config, tracking_uri
from jobs.lake.layout import ROOT_ENV, Lake
from jobs.lake.reports import read_report
from jobs.metrics import HOLDOUT


def collect(lake: Lake, run_date: dt.date) -> dict[str, Any]:
    """The day's scoring report joined with the scoring model version's tags."""
    from jobs.tracking import client

    scoring = read_report(lake, "scoring", run_date)
    version = client().get_model_version(scoring["model_name"], scoring["model_version"])
    return {"scoring": scoring, "model_tags": dict(version.tags), "registered_at": version.creation_timestamp}


def render(summary: dict[str, Any], label_description: str | None = None) -> str:
    """The summary for a person; ``label_description`` (``features.label_description``) says
    what the probabilities are of."""
    scoring, tags = summary["scoring"], summary["model_tags"]
    label_description = label_description or load_config().features.label_description
    metrics = ", ".join(f"{m} {float(tags[f'holdout_{m}']):.3f}" for m in HOLDOUT if f"holdout_{m}" in tags)
    rows = [
        ("model", f"{scoring['model_name']} version {scoring['model_version']} (MLflow run {scoring['model_run_id']})"),
        ("trained on", f"{tags.get('train_window', '?')}, validation days {tags.get('validation_window', 'none')} "
                       f"(they choose the threshold), evaluated on {tags.get('holdout_window', '?')}"),
        ("holdout metrics", metrics or "none recorded"),
        ("predictions", f"{scoring['rows']} rows for {scoring['run_date']} at {scoring['path']}"),
        ("mean probability", f"{scoring['mean_probability']:.3f} of {label_description}"),
        ("drift", drift_line(scoring.get("drift"))),
        ("MLflow store", f"{tracking_uri()} (browse: mlflow ui --backend-store-uri {tracking_uri()})"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def drift_line(drift: dict[str, Any] | None) -> str:
    """The scoring summary's drift verdict (summaries written before the headline existed: the reasons)."""
    if not drift:
        return "not measured (the model has no drift baseline)"
    verdict = drift.get("headline") or "; ".join(drift["reasons"]) or "none over the thresholds"
    if "predictions PSI" in verdict:  # the model's own outputs moving is a symptom, not a trigger
        verdict += " (reported, not alerted on)"
    return f"{verdict}; report at {drift['report']}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--run-date", type=dt.date.fromisoformat, required=True,
                        help="the scored day to show (YYYY-MM-DD)")
    parser.add_argument("--lake-root", default=None, help=f"lake root folder (default: ${ROOT_ENV})")
    args = parser.parse_args(argv)
    config = load_config()  # fails early on a broken config
    print(render(collect(Lake.at(args.lake_root), args.run_date), config.features.label_description))


if __name__ == "__main__":
    main()
