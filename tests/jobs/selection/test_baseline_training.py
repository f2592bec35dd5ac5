"""The MLlib baselines on four real days (two to fit, one to validate, one holdout), in a
throw-away MLflow store: their runs, their Spark-free pyfuncs, the evaluation report recomputed
from its saved predictions, the bar that stops a worse candidate of the same training (and no
candidate of another training, config or data version, nor any when no baselines are configured),
and a baseline that beats the candidate serving in its place when the config lets it."""

from __future__ import annotations

import datetime as dt
import json

import mlflow.pyfunc
import numpy as np
import pytest

from jobs.config import BaselineSpec

RUN_DATE = dt.date(2013, 1, 5)
TRAINING = "flights_train/manual__2013-01-05"
BASELINES = (BaselineSpec("logistic_regression", "logistic_regression", {"maxIter": 20, "regParam": 0.01}),
             BaselineSpec("gbt", "gbt", {"maxIter": 3, "maxDepth": 3}))


@pytest.fixture(scope="module")
def trained(spark, features_zone, config, config_patch, tmp_path_factory):
    from jobs.lake.layout import Lake
    from jobs.selection.baseline_training import train_baselines

    home = tmp_path_factory.mktemp("baselines")
    days = [dt.date(2013, 1, d) for d in (2, 3, 4, 5)]
    features_zone.copy(days, home / "lake" / "features")
    cfg = config_patch.replace(config, baselines=BASELINES, train={
        "train_days": 2, "validation_days": 1, "holdout_days": 1, "model_name": "baseline_tests",
        "experiment": "baseline-tests", "min_category_count": 1})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{home}/mlflow.db")
        patch.setenv("PIPELINE_MLFLOW_ARTIFACTS", str(home / "artifacts"))
        found = train_baselines(spark, Lake.at(str(home / "lake")), cfg, RUN_DATE, started_by="a test",
                                training_id=TRAINING)
        yield {"results": {r["name"]: r for r in found}, "config": cfg, "lake": Lake.at(str(home / "lake"))}


def test_each_baseline_is_its_own_run_with_params_metrics_report_and_a_model_with_signature(spark, trained):
    import mlflow

    from jobs.selection.identity import config_fingerprint, data_fingerprint
    from jobs.tracking import client

    for name, result in trained["results"].items():
        run = client().get_run(result["run_id"])
        assert run.info.status == "FINISHED"
        assert run.data.tags["candidate_kind"] == "baseline" and run.data.tags["candidate_name"] == name
        assert run.data.tags["holdout_window"] == "2013-01-05..2013-01-05"
        assert run.data.tags["training_id"] == TRAINING
        assert run.data.tags["config_fingerprint"] == config_fingerprint(trained["config"])
        lake = trained["lake"]
        window = [lake.partition(lake.features, dt.date(2013, 1, d)) for d in (2, 3, 4, 5)]
        assert run.data.tags["data_fingerprint"] == data_fingerprint(spark, window)
        assert run.data.params["train_window"] == "2013-01-02..2013-01-03"
        assert run.data.metrics["holdout_roc_auc"] == result["metrics"]["roc_auc"] > 0.55
        assert "validation_roc_auc" in run.data.metrics and "threshold" in run.data.metrics
        artifacts = {a.path for a in client().list_artifacts(result["run_id"], "evaluation")}
        assert {f"evaluation/{f}" for f in ("report.json", "segments.csv", "holdout_predictions.parquet",
                                            "roc_curve.png", "pr_curve.png", "calibration.png",
                                            "confusion_matrix.png", "segments.png")} <= artifacts
        model = mlflow.models.get_model_info(result["model_uri"])
        assert model.signature is not None and model.signature.inputs.input_names()[:2] == ["carrier", "origin"]


def test_the_report_equals_what_its_saved_predictions_give(trained):
    """Every number of the report comes back from the holdout predictions logged beside it; the
    threshold was chosen on the validation day, not on them."""
    import mlflow.artifacts

    from jobs.selection.evaluation import REPORT, best_f1_threshold, build_report, read_predictions
    from jobs.tracking import client

    config = trained["config"]
    for result in trained["results"].values():
        report = mlflow.artifacts.load_dict(f"runs:/{result['run_id']}/{REPORT}")
        predictions = read_predictions(result["run_id"])
        assert len(predictions) == result["metrics"]["rows"]
        again = build_report(predictions, config.features.label, config.evaluation, report["threshold"],
                             report["validation"])
        assert json.loads(json.dumps(again)) == report
        assert report["threshold"]["policy"] == "validation_f1"
        assert report["threshold"]["value"] != best_f1_threshold(predictions["label"], predictions["probability"])
        metrics = client().get_run(result["run_id"]).data.metrics
        assert metrics["holdout_f1"] == report["confusion"]["f1"]
        assert metrics["holdout_roc_auc"] == report["holdout"]["roc_auc"]


@pytest.mark.parametrize("name", [spec.name for spec in BASELINES])
def test_the_pyfunc_predicts_what_the_spark_model_predicts(spark, trained, name):
    """The exported numbers and the design matrix built without Spark give Spark's own probabilities."""
    from pyspark.ml.functions import vector_to_array

    from jobs.model.baseline import DESIGNS, design_matrix, design_width, export, predict_design
    from jobs.selection.baseline_training import design_column

    lake, config, result = trained["lake"], trained["config"], trained["results"][name]
    model, pre, kind = result["spark_model"], result["preprocessor"], dict((s.name, s.kind) for s in BASELINES)[name]
    design = DESIGNS[kind]
    holdout = spark.read.parquet(lake.partition(lake.features, RUN_DATE))
    scored = (model.transform(holdout.select(*config.features.inputs, design_column(pre, design)))
              .select(*config.features.inputs, vector_to_array("probability")[1].alias("spark")).toPandas())
    # the trees see each category as one index column, logistic regression as one-hot blocks
    assert model.numFeatures == design_width(pre, design) == (
        len(pre.categorical) + len(pre.numeric) if kind == "gbt" else sum(pre.cardinalities) + len(pre.numeric))
    mine = predict_design(kind, export(model, kind), design_matrix(pre, scored, design))
    assert scored["spark"].std() > 0.01  # a model that tells rows apart
    np.testing.assert_allclose(mine, scored["spark"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("design", ["onehot", "codes"])
def test_the_design_rows_run_as_code_the_jvm_compiles(spark, trained, design):
    """Each design's projection generates a method longer than HotSpot compiles (its HugeMethodLimit,
    8000 bytes: the JVM would interpret it, row by row); the session's limit keeps Spark from
    running it as whole-stage code (jobs.runtime.session.SESSION_CONF), and the rows come out whole."""
    from jobs.selection.baseline_training import design_rows

    lake, config = trained["lake"], trained["config"]
    pre = trained["results"]["logistic_regression"]["preprocessor"]
    features = spark.read.parquet(lake.partition(lake.features, dt.date(2013, 1, 2)))
    rows = design_rows(features, pre, config.features.label, design)
    plan = rows._jdf.queryExecution().executedPlan()
    assert plan.getClass().getSimpleName() == "WholeStageCodegenExec"
    compiled = spark._jvm.org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator.compile(plan.doCodeGen()._2())
    assert compiled._2().maxMethodCodeSize() > 8000
    assert int(spark.conf.get("spark.sql.codegen.hugeMethodLimit")) <= 8000
    assert rows.count() == features.where(f"{config.features.label} IS NOT NULL").count() > 0


@pytest.mark.parametrize("name", [spec.name for spec in BASELINES])
def test_the_baseline_is_calibrated_on_the_validation_day_without_changing_its_ranking(spark, trained, name):
    """Each baseline's pyfunc carries a logit scale fitted on the validation day (train.calibration
    temperature): no worse a log loss there than the exported model's, the same ROC AUC on the
    holdout, whose logged metrics are the calibrated model's."""
    from jobs.metrics import evaluate
    from jobs.model.baseline import DESIGNS, design_matrix, export, predict_design
    from jobs.selection.bar import read_rows
    from jobs.tracking import client

    lake, config, result = trained["lake"], trained["config"], trained["results"][name]
    inputs, label = config.features.inputs, config.features.label
    kind = dict((s.name, s.kind) for s in BASELINES)[name]
    params, pre = export(result["spark_model"], kind), result["preprocessor"]
    model = mlflow.pyfunc.load_model(result["model_uri"])
    scale = model.unwrap_python_model().logit_scale
    run = client().get_run(result["run_id"])
    assert run.data.params["calibration"] == "temperature" and run.data.metrics["calibration_logit_scale"] == scale
    validation = read_rows(spark, [lake.partition(lake.features, dt.date(2013, 1, 4))], inputs, label)
    assert run.data.metrics["calibration_validation_rows"] == len(validation)
    design = DESIGNS[kind]
    before = evaluate(validation[label],
                      predict_design(kind, params, design_matrix(pre, validation, design)))["log_loss"]
    after = evaluate(validation[label], model.predict(validation[inputs]))["log_loss"]
    assert after <= before
    holdout = read_rows(spark, [lake.partition(lake.features, RUN_DATE)], inputs, label)
    calibrated = evaluate(holdout[label], model.predict(holdout[inputs]))
    raw = evaluate(holdout[label], predict_design(kind, params, design_matrix(pre, holdout, design)))
    assert calibrated["roc_auc"] == pytest.approx(raw["roc_auc"], abs=1e-12)
    assert run.data.metrics["holdout_log_loss"] == result["metrics"]["log_loss"] == calibrated["log_loss"]


@pytest.mark.parametrize("metric", ["roc_auc", "daily_roc_auc"])
def test_a_worse_candidate_is_stopped_before_the_gate_with_the_reason(spark, trained, config_patch, metric):
    """A candidate that predicts the positives' share for every row (holdout ROC AUC 0.5) does not
    beat the baselines: registered, tagged why, compared in the table, never champion. The same
    with the daily ROC AUC as the promotion metric (each baseline's run logged it, from the holdout
    rows' days: one day here, so it is the pooled one)."""
    import mlflow
    import mlflow.artifacts

    from jobs.selection.bar import COMPARISON, STOPPED, assess
    from jobs.tracking import client

    config, lake = trained["config"], trained["lake"]
    for result in trained["results"].values():
        logged = client().get_run(result["run_id"]).data.metrics
        assert logged["holdout_daily_roc_auc"] == pytest.approx(logged["holdout_roc_auc"])
    run, info = candidate_run(trained)
    model = f"worse_candidates_{metric}"
    version = mlflow.register_model(info.model_uri, model).version
    stopped_config = config_patch.replace(config, train={"model_name": model, "promotion_metric": metric})
    decision = assess(spark, stopped_config, run.info.run_id, info.model_uri,
                      [lake.partition(lake.features, RUN_DATE)], [lake.partition(lake.features, dt.date(2013, 1, 4))],
                      RUN_DATE, "2013-01-05..2013-01-05", version=str(version))
    assert decision is not None and not decision.promote
    assert "does not beat the best baseline" in decision.reason and decision.tags()["gate_decision"] == STOPPED
    found = client().get_run(run.info.run_id).data.tags
    assert found["bar_decision"] == STOPPED and found["bar_reason"] == decision.reason
    assert client().get_model_version(model, str(version)).tags["gate_decision"] == STOPPED
    assert not client().get_registered_model(model).aliases  # nothing promoted
    assert client().get_run(run.info.run_id).data.metrics["holdout_daily_roc_auc"] == 0.5
    table = mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/{COMPARISON}")
    assert [line.split(" | ")[1] for line in table.splitlines()[2:]] == ["pytorch", "gbt", "logistic_regression"]


class Constant(mlflow.pyfunc.PythonModel):
    """A candidate that knows nothing: the same probability for every row."""

    def predict(self, context, model_input, params=None):
        return np.full(len(model_input), 0.25)


def candidate_run(trained, **tags):
    """A finished run of the :class:`Constant` candidate with the identity tags of the baselines'
    training, ``tags`` changed (None: left out); the run and its logged model."""
    import mlflow

    from jobs.selection.identity import IDENTITY
    from jobs.tracking import client, ensure_experiment

    baseline = client().get_run(trained["results"]["gbt"]["run_id"]).data.tags
    identity = {key: baseline[key] for key in IDENTITY} | tags
    with mlflow.start_run(experiment_id=ensure_experiment(trained["config"].train.experiment),
                          tags={k: v for k, v in identity.items() if v is not None}) as run:
        info = mlflow.pyfunc.log_model(name="model", python_model=Constant(), input_example=None)
    return run, info


@pytest.mark.parametrize(("tags", "why"), [
    ({"training_id": "flights_train/manual__another"}, "no baselines of this training"),
    ({"config_fingerprint": "0123456789abcdef"}, "no baselines of this training"),
    ({"data_fingerprint": "0123456789abcdef"}, "no baselines of this training"),
    ({"training_id": None}, "no baselines: the candidate has no training identity tags"),
])
def test_the_bar_compares_only_with_baselines_of_the_same_training_config_and_data(spark, trained, config_patch,
                                                                                  tags, why):
    """The same worse candidate, but of another training, config or data version (or logged
    without identity tags): the baselines of the same window that the experiment holds are not
    its, so nothing stops it and the comparison table lists no baseline."""
    import mlflow.artifacts

    from jobs.selection.bar import COMPARISON, assess
    from jobs.tracking import client

    config, lake = trained["config"], trained["lake"]
    run, info = candidate_run(trained, **tags)
    decision = assess(spark, config_patch.replace(config, evaluation={"plots": False}), run.info.run_id,
                      info.model_uri, [lake.partition(lake.features, RUN_DATE)],
                      [lake.partition(lake.features, dt.date(2013, 1, 4))], RUN_DATE, "2013-01-05..2013-01-05")
    assert decision is None
    assert client().get_run(run.info.run_id).data.tags["bar_decision"] == why
    table = mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/{COMPARISON}")
    roles = [line.split(" | ")[0] for line in table.splitlines()[2:]]
    assert roles == ["| candidate"]


def test_with_no_baselines_configured_the_bar_is_open_whatever_the_experiment_holds(spark, trained, config_patch):
    """``baselines: []`` (the replay's --baselines 0): a candidate of the very training whose
    baselines it would not beat goes on to the gate."""
    from jobs.selection.bar import assess
    from jobs.tracking import client

    config, lake = trained["config"], trained["lake"]
    run, info = candidate_run(trained)
    open_config = config_patch.replace(config, baselines=(), evaluation={"plots": False})
    decision = assess(spark, open_config, run.info.run_id, info.model_uri, [lake.partition(lake.features, RUN_DATE)],
                      [lake.partition(lake.features, dt.date(2013, 1, 4))], RUN_DATE, "2013-01-05..2013-01-05")
    assert decision is None
    assert client().get_run(run.info.run_id).data.tags["bar_decision"] == "no baselines configured"


def test_the_window_s_drift_feature_bins_come_from_a_baseline_of_the_same_training_only(spark, trained):
    """What the train job promoting a sweep's candidate reads instead of binning the window again: a
    baseline's logged feature bins, equal to those of the window's rows binned afresh with a
    preprocessor fitted afresh; for a run of another training, or one without identity tags, none."""
    from jobs.scoring.drift import PREDICTION, feature_bins
    from jobs.selection.baseline_training import logged_feature_bins
    from jobs.tracking import client
    from jobs.training.data import feature_dirs, fit_preprocessor

    config, lake = trained["config"], trained["lake"]
    window = "2013-01-05..2013-01-05"
    run, _ = candidate_run(trained)
    found = logged_feature_bins(client(), run.info.run_id, RUN_DATE, window)
    days = [dt.date(2013, 1, 2), dt.date(2013, 1, 3)]  # the baselines' training days
    features = spark.read.option("basePath", lake.features).parquet(*feature_dirs(spark, lake, days))
    pre = fit_preprocessor(features, config.features, config.train.min_category_count,
                           clip=config.train.clip_to_training_range, local_max_rows=config.train.in_process_max_rows)
    afresh = feature_bins(features, pre, config.score.drift.bins, config.train.in_process_max_rows)
    assert found is not None and PREDICTION not in found and found["rows"] > 0
    assert json.loads(json.dumps(afresh)) == found  # as logged: JSON
    for other in ({"training_id": "flights_train/manual__another"}, {"training_id": None}):
        stranger, _ = candidate_run(trained, **other)
        assert logged_feature_bins(client(), stranger.info.run_id, RUN_DATE, window) is None


@pytest.mark.e2e  # the promotion job, in this process as the replay runs it
def test_a_baseline_that_may_serve_and_beats_the_candidate_goes_to_the_gate_in_its_place(
        spark, trained, config_patch, tmp_path):
    """``promote: true``: the sweep's chosen candidate (here one that knows nothing, holdout ROC AUC
    0.5) loses to the baselines, so the promotion job registers and gates the best baseline that may
    serve instead; the candidate's run says why; the score job's own code serves the baseline
    unchanged. With no baseline that may serve, the candidate goes on (and the bar stops it)."""
    from pyspark.sql import functions as F

    from jobs.promotion import job as promotion_job
    from jobs.scoring.predictor import model_preprocessor, resolve_model, score_features
    from jobs.selection.bar import STOPPED, in_its_place
    from jobs.selection.sweep import MODEL_URI_TAG
    from jobs.tracking import champion_version, client

    lake, results = trained["lake"], trained["results"]
    run, info = candidate_run(trained)
    client().log_metric(run.info.run_id, "holdout_roc_auc", 0.5)
    client().set_tag(run.info.run_id, MODEL_URI_TAG, info.model_uri)
    window = "2013-01-05..2013-01-05"
    assert in_its_place(trained["config"], client(), run.info.run_id, RUN_DATE, window) is None  # none may serve
    train = {"train_days": 2, "validation_days": 1, "holdout_days": 1, "model_name": "served_baselines",
             "experiment": "baseline-tests", "min_category_count": 1}
    may_serve = [{"name": s.name, "kind": s.kind, "params": s.params, "promote": True} for s in BASELINES]
    config_path = config_patch.write(tmp_path, baselines=may_serve, train=train, evaluation={"plots": False})

    def refit(*_args, **_kwargs):
        raise AssertionError("promoting refitted the preprocessor: the baselines of its training logged the bins")

    with pytest.MonkeyPatch.context() as patch:  # nothing is trained: the drift bins come from a baseline
        patch.setattr(promotion_job, "fit_preprocessor", refit)
        promotion_job.main(["--run-date", str(RUN_DATE), "--config", str(config_path), "--lake-root", lake.root,
                            "--candidate-run", run.info.run_id, "--started-by", "a test"])
    best = max(results.values(), key=lambda r: r["metrics"]["roc_auc"])
    champion = champion_version("served_baselines")
    assert champion is not None and champion.run_id == best["run_id"]  # the better of the two: it beat the other
    tags = client().get_run(run.info.run_id).data.tags
    assert tags["bar_decision"] == STOPPED and f"the baseline {best['name']}" in tags["bar_reason"]
    assert "in its place" in tags["bar_reason"]
    assert client().get_run(best["run_id"]).data.tags["candidate_kind"] == "baseline"  # still a baseline run
    assert client().get_model_version("served_baselines", champion.version).tags["model_family"] == best["name"]

    ref, uri = resolve_model("served_baselines", None)  # as the score job resolves it, on the driver
    assert ref.version == champion.version and model_preprocessor(uri) is None  # scoring passes raw feature columns
    config = trained["config"]
    features = spark.read.parquet(lake.partition(lake.features, RUN_DATE)).withColumn("date", F.lit(RUN_DATE))
    scored = score_features(features, config.features, ref, uri, 256, RUN_DATE).toPandas()
    expected = mlflow.pyfunc.load_model(uri).predict(features.toPandas()[config.features.inputs])
    assert len(scored) == len(expected)
    np.testing.assert_allclose(np.sort(scored["probability"]), np.sort(expected), rtol=1e-12)


def _renamed_copy(features_zone, days, zone, name, twin) -> None:
    """``days``' features copied into ``zone`` with each Parquet file renamed (``name`` of the day),
    and ``twin`` (a day after them) holding a copy of the first day's file: two files of one size,
    which Spark's packing of files into partitions (by size) leaves in the order they list in."""
    import shutil

    from jobs.lake.layout import partition_name

    features_zone.copy(days, zone)
    for day in days:
        (part,) = (zone / partition_name(day)).glob("*.parquet")
        part.rename(part.with_name(name(day)))
    (zone / partition_name(twin)).mkdir()
    (first,) = (zone / partition_name(days[0])).glob("*.parquet")
    shutil.copy(first, zone / partition_name(twin) / name(twin))


def test_the_baselines_read_a_window_s_rows_in_one_order_however_its_files_are_named(
        spark, features_zone, config, tmp_path):
    """Two lakes of the same day files under other names (two builds of the same days): the rows the
    baselines fit on (:func:`training_rows`) come in the same partitions and the same order, and a
    GBT fitted on each is the same model. MLlib's GBT picks its split candidates from rows sampled by
    position: coalesced as listed, the two lakes of one 2013 window gave GBTs 0.0077 ROC AUC apart."""
    from jobs.lake.layout import PARTITION, Lake
    from jobs.selection.baseline_training import design_rows, fit, training_rows
    from jobs.training.data import fit_preprocessor

    days, twin = [dt.date(2013, 1, d) for d in (2, 3, 4, 5, 6, 7)], dt.date(2013, 1, 20)
    names = {"listed": lambda day: f"part-{day.day:05d}-a.snappy.parquet",
             "reversed": lambda day: f"part-{99 - day.day:05d}-b.snappy.parquet"}
    lakes = {}
    for key, name in names.items():
        _renamed_copy(features_zone, days, tmp_path / key / "features", name, twin)
        lakes[key] = Lake.at(str(tmp_path / key))
    days.append(twin)
    ids = [PARTITION, *config.features.id_columns]

    def order(frame) -> list:
        from pyspark.sql import functions as F

        return [tuple(r) for r in frame.select(F.spark_partition_id().alias("p"), *ids).collect()]

    dirs = {key: [str(tmp_path / key / "features" / f"date={d}") for d in days] for key in lakes}
    rows = {key: training_rows(spark, lake, dirs[key], config) for key, lake in lakes.items()}
    assert order(rows["listed"]) == order(rows["reversed"])
    assert rows["listed"].rdd.getNumPartitions() == spark.sparkContext.defaultParallelism
    label = config.features.label
    pre = fit_preprocessor(rows["listed"], config.features, 1)
    spec = BaselineSpec("gbt", "gbt", {"maxIter": 3, "maxDepth": 3})
    holdout = design_rows(features_zone.frame([dt.date(2013, 1, 8)]), pre, label, "codes")
    scored = [fit(design_rows(rows[key], pre, label, "codes"), spec, label, 13).transform(holdout)
              .select("probability").collect() for key in lakes]
    assert scored[0] == scored[1]
