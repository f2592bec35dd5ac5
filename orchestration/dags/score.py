"""
### Scoring: score the days whose features just landed, measure drift, start retraining on drift

Runs when `<pipeline>_ingest` updates the `features` Asset (one run may cover several days when
events arrive together: it plans every `features` event no earlier run planned, also one that
Airflow left out of every run) and when a new version becomes `champion` (the `champion_model` Asset:
the day it was trained up to is scored again with it). For each day *D*, `score_batch` scores
the day's features with the champion version of the model and writes `predictions/date=D/`
(replacing only that day: re-running is safe), and measures *D*'s drift against the champion's
training window (`reports/drift/date=D/`). When *D* drifted, `check_drift` updates the
`scoring_drift` Asset, which starts `<pipeline>_train`; a day scored again after the retraining its
own drift started does not start another. `monitor_day` joins the predictions of the day whose
outcomes have just landed (*D* minus `monitoring.label_delay_days`) with those outcomes and writes
its realized metrics, with 95% intervals, to `monitoring/date=.../` and to each model version's
MLflow monitoring run (the only writer of the zone); with a label delay, *D* itself gets the
estimate made from its probabilities until its outcomes land. `check_decay` then judges the
champion's realized quality on the monitored days up to *D* minus the delay (`reports/decay/`) and
updates the `model_decay` Asset when it decayed (once per version and window).

Challengers (up to `monitoring.challengers` versions that are not champion: the one awaiting
approval or live evidence, near misses of the gate) are scored in shadow beside the champion
(`shadow/version=V/`, never served) and compared with it on the outcomes by `monitor_day`. With
`monitoring.promotion_evidence: live`, `promote_challenger` makes a challenger that won on the
holdout champion once it beats the champion on `monitoring.live_days` live days, and updates
`champion_model`; otherwise it is skipped.

Before any model is champion (a new deployment ingests first) the run is skipped, saying so.
It reads `features/` and never writes it. **Trigger** from the UI with `{"run_date": "2013-01-29"}`
to score one day whose features exist (a missing day fails at once, saying how to ingest it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import DAG

from orchestration.assets import pipeline_assets
from orchestration.dags.common import dag_settings, run_date_param
from orchestration.score_tasks import challenger_promotion, decay_check, drift_check, plan_scoring
from orchestration.spark_jobs import spark_job_per_day

if TYPE_CHECKING:
    from jobs.config.pipelines import Pipeline


def score_dag(pipeline: Pipeline) -> DAG:
    """The pipeline's score DAG (this module's docstring is its doc)."""
    assets = pipeline_assets(pipeline.name)
    with DAG(
        **dag_settings(pipeline, "score", __doc__ or "", "scoring"),
        description="Score the days whose features landed with the champion; drift starts retraining",
        schedule=assets.features | assets.champion,
        params={"run_date": run_date_param("the day to score (empty: the days of the triggering events)")},
    ) as dag:
        days = plan_scoring(pipeline)
        score_batch = spark_job_per_day("score", pipeline, days, task_id="score_batch")
        check_drift = drift_check(pipeline, days)
        monitor_day = spark_job_per_day("monitor", pipeline, days, task_id="monitor_day")
        check_decay = decay_check(pipeline, days)
        promote_challenger = challenger_promotion(pipeline, days)
        score_batch >> check_drift
        score_batch >> monitor_day >> check_decay
        monitor_day >> promote_challenger
    return dag
