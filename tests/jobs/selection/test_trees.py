"""The sweep's xgboost family on four real days (two to fit, one to validate, one holdout), in a
throw-away MLflow store: a SparkXGBClassifier candidate under a sweep's parent beside an MLP
candidate of the same training, its Spark-free pyfunc (equal to Spark's predictions), its report
and tags, the sweep's choice between the families, the promotion of the xgboost run through the
promotion job's path, and scoring it with the score job's predict function.

The GPU (``device="cuda"``) is not testable on this CPU machine (``xgboost-cpu`` has no CUDA
code): only that the estimator's device follows ``train.use_gpu``."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from jobs.model.calibration import apply_scale

RUN_DATE = dt.date(2013, 1, 5)
TRAINING = "flights_train/manual__xgboost"
PARAMS = {"n_estimators": 30, "max_depth": 4, "learning_rate": 0.2, "min_child_weight": 1.0}
DAYS = {"train": [dt.date(2013, 1, 2), dt.date(2013, 1, 3)], "validation": [dt.date(2013, 1, 4)],
        "holdout": [RUN_DATE]}


def mlp_candidate(spark, config, pre, dirs, windows, parent, identity) -> str:
    """An MLP candidate run of the same sweep and training: a small net fitted in this process
    (the sweep's TorchDistributor training is tested elsewhere), logged and finished as the train
    job finishes a candidate."""
    import mlflow
    import torch

    from jobs.metrics import evaluate
    from jobs.model.tabular import build_net, log_pyfunc
    from jobs.selection.bar import FAMILY, read_rows
    from jobs.selection.sweep import finish_candidate
    from jobs.tracking import client, ensure_experiment

    spec = config.features
    rows = read_rows(spark, dirs["train"], spec.inputs, spec.label)
    torch.manual_seed(0)
    net = build_net(pre, {"embedding_dim": 4, "hidden_units": [16]})
    cats, nums = (torch.from_numpy(a) for a in pre.encode(rows))
    labels = torch.tensor(rows[spec.label].to_numpy(), dtype=torch.float32)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(60):
        optimizer.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(net(cats, nums), labels).backward()
        optimizer.step()
    mlflow_client = client()
    run = mlflow_client.create_run(ensure_experiment(config.train.experiment),
                                   tags={"mlflow.parentRunId": parent, FAMILY: "mlp", **identity})
    with mlflow.start_run(run_id=run.info.run_id):
        info = log_pyfunc(net, pre, {"embedding_dim": 4, "hidden_units": [16]}, rows.head(5))
    holdout = read_rows(spark, dirs["holdout"], spec.inputs, spec.label)
    # the holdout metrics rank 0 logs; the report of finish_candidate logs the validation ones
    metrics = evaluate(holdout[spec.label], mlflow.pyfunc.load_model(info.model_uri).predict(holdout[spec.inputs]))
    for key, value in metrics.items():
        mlflow_client.log_metric(run.info.run_id, f"holdout_{key}", value)
    finish_candidate(spark, config, run.info.run_id, {"model_uri": info.model_uri, "metrics": metrics},
                     dirs["holdout"], dirs["validation"], RUN_DATE, windows["holdout"], "mlp-small", None)
    return run.info.run_id


@pytest.fixture(scope="module")
def swept(spark, features_zone, config, config_patch, tmp_path_factory):
    from jobs.lake.layout import Lake
    from jobs.selection.identity import data_fingerprint, identity_tags
    from jobs.selection.sweep import open_parent
    from jobs.selection.trees import train_candidate
    from jobs.training.data import feature_dirs, fit_preprocessor

    home = tmp_path_factory.mktemp("trees")
    features_zone.copy([d for days in DAYS.values() for d in days], home / "lake" / "features")
    lake = Lake.at(str(home / "lake"))
    cfg = config_patch.replace(config, baselines=(), train={
        "train_days": 2, "validation_days": 1, "holdout_days": 1, "model_name": "xgboost_tests",
        "experiment": "xgboost-tests", "min_category_count": 1, "num_processes": 2})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{home}/mlflow.db")
        patch.setenv("PIPELINE_MLFLOW_ARTIFACTS", str(home / "artifacts"))
        dirs = {part: feature_dirs(spark, lake, days) for part, days in DAYS.items()}
        windows = {part: f"{days[0]}..{days[-1]}" for part, days in DAYS.items()}
        features = spark.read.option("basePath", lake.features).parquet(*dirs["train"])
        pre = fit_preprocessor(features, cfg.features, cfg.train.min_category_count)
        identity = identity_tags(cfg, data_fingerprint(spark, [d for part in dirs.values() for d in part]), TRAINING)
        parent = open_parent(cfg, str(RUN_DATE), [{"name": "xgboost"}, {"name": "mlp-small"}], "a test", TRAINING)
        found = train_candidate(spark, cfg, RUN_DATE, dirs, windows, pre, PARAMS, "xgboost", parent, 2, identity)
        mlp = mlp_candidate(spark, cfg, pre, dirs, windows, parent, identity)
        yield {"xgboost": found, "mlp": mlp, "parent": parent, "config": cfg, "lake": lake, "dirs": dirs,
               "windows": windows, "features": features, "pre": pre, "identity": identity}


def test_the_pyfunc_predicts_what_spark_predicts_without_spark(spark, swept):
    """The logged booster and its preprocessor, loaded as a pyfunc, give SparkXGBClassifier's own
    probabilities on the holdout's rows and on rows with an unseen category, nulls, an infinity and
    a number beyond float32's range."""
    import mlflow.pyfunc
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    from jobs.selection.trees import design_column

    config, pre = swept["config"], swept["pre"]
    inputs = config.features.inputs
    holdout = spark.read.parquet(*swept["dirs"]["holdout"]).select(*inputs)
    odd = (holdout.limit(4).withColumn("carrier", F.lit("ZZ")).withColumn("distance", F.lit(float("inf")))
           .withColumn("temp", F.lit(None).cast("double")).withColumn("pressure", F.lit(1e300))
           .withColumn("dest", F.lit(None).cast("string")))
    rows = holdout.unionByName(odd)
    scored = (swept["xgboost"]["spark_model"].transform(rows.select(*inputs, design_column(pre)))
              .select(*inputs, vector_to_array("probability")[1].alias("spark")).toPandas())
    model = mlflow.pyfunc.load_model(swept["xgboost"]["model_uri"])
    mine = model.predict(scored[inputs])
    assert scored["spark"].std() > 0.01  # a model that tells rows apart
    assert scored["temp"].isna().sum() >= 4 and (scored["carrier"] == "ZZ").sum() == 4
    # the pyfunc is Spark's model with the calibration's logit scale (train.calibration) applied
    scale = model.unwrap_python_model().logit_scale
    np.testing.assert_allclose(mine, apply_scale(scored["spark"].to_numpy(), scale), rtol=0, atol=1e-6)


def test_the_candidate_is_calibrated_on_the_validation_day_without_changing_its_ranking(spark, swept):
    """The logged booster's logit scale was fitted on the validation day's probabilities: its
    log loss there is not worse than the booster's own, and on the holdout it ranks exactly as the
    uncalibrated booster (the same ROC AUC)."""
    import mlflow.pyfunc

    from jobs.metrics import evaluate
    from jobs.model.booster import predict_booster
    from jobs.selection.bar import read_rows
    from jobs.tracking import client

    config, pre = swept["config"], swept["pre"]
    inputs, label = config.features.inputs, config.features.label
    model = mlflow.pyfunc.load_model(swept["xgboost"]["model_uri"])
    booster = swept["xgboost"]["spark_model"].get_booster()
    run = client().get_run(swept["xgboost"]["run_id"])
    scale = model.unwrap_python_model().logit_scale
    assert run.data.params["calibration"] == "temperature"
    assert run.data.metrics["calibration_logit_scale"] == scale != 1.0
    validation = read_rows(spark, swept["dirs"]["validation"], inputs, label)
    assert run.data.metrics["calibration_validation_rows"] == len(validation) > 100
    before = evaluate(validation[label], predict_booster(booster, pre, validation[inputs]))["log_loss"]
    after = evaluate(validation[label], model.predict(validation[inputs]))["log_loss"]
    assert after <= before
    assert run.data.metrics["calibration_log_loss_after"] <= run.data.metrics["calibration_log_loss_before"]
    holdout = read_rows(spark, swept["dirs"]["holdout"], inputs, label)
    calibrated = evaluate(holdout[label], model.predict(holdout[inputs]))
    raw = evaluate(holdout[label], predict_booster(booster, pre, holdout[inputs]))
    assert calibrated["roc_auc"] == pytest.approx(raw["roc_auc"], abs=1e-12)
    assert run.data.metrics["holdout_log_loss"] == calibrated["log_loss"]  # the holdout metrics: the calibrated model's


def test_the_candidate_is_a_child_run_of_its_training_with_the_report_and_model_tags(spark, swept):
    import mlflow

    from jobs.selection.evaluation import REPORT
    from jobs.selection.identity import IDENTITY
    from jobs.selection.sweep import MODEL_URI_TAG
    from jobs.tracking import client

    run = client().get_run(swept["xgboost"]["run_id"])
    tags = run.data.tags
    assert run.info.status == "FINISHED"
    assert tags["mlflow.parentRunId"] == swept["parent"] and tags["model_family"] == "xgboost"
    assert tags["candidate_kind"] == "candidate" and tags["candidate_name"] == "xgboost"
    assert {key: tags[key] for key in IDENTITY} == swept["identity"]
    assert tags["holdout_window"] == "2013-01-05..2013-01-05" and tags[MODEL_URI_TAG] == swept["xgboost"]["model_uri"]
    assert run.data.params["n_estimators"] == "30" and run.data.params["family"] == "xgboost"
    assert run.data.metrics["holdout_roc_auc"] == swept["xgboost"]["metrics"]["roc_auc"] > 0.55
    assert "validation_roc_auc" in run.data.metrics and "threshold" in run.data.metrics
    report = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{REPORT}")
    assert report["holdout"]["roc_auc"] == pytest.approx(run.data.metrics["holdout_roc_auc"], abs=1e-9)
    model = mlflow.models.get_model_info(swept["xgboost"]["model_uri"])
    assert model.signature.inputs.input_names() == swept["config"].features.inputs
    requirements = mlflow.pyfunc.get_model_dependencies(swept["xgboost"]["model_uri"])
    assert "xgboost" in open(requirements).read()  # the scorer's environment gets XGBoost


def test_the_sweep_chooses_between_the_families_on_the_validation_days(swept):
    import mlflow.artifacts

    from jobs.selection.sweep import best_candidate
    from jobs.tracking import client

    runs = {family: client().get_run(run_id).data.metrics["validation_roc_auc"]
            for family, run_id in (("xgboost", swept["xgboost"]["run_id"]), ("mlp", swept["mlp"]))}
    best = best_candidate(swept["config"], swept["parent"])
    winner = max(runs, key=runs.get)
    assert best["family"] == winner and best["score"] == runs[winner]
    assert best["run_id"] == (swept["xgboost"]["run_id"] if winner == "xgboost" else swept["mlp"])
    parent = client().get_run(swept["parent"]).data.tags
    assert parent["best_family"] == winner and parent["best_run_id"] == best["run_id"]
    table = mlflow.artifacts.load_text(f"runs:/{swept['parent']}/sweep/candidates.csv")
    assert sorted(line.split(",")[2] for line in table.splitlines()[1:]) == ["mlp", "xgboost"]


def test_the_xgboost_run_is_promoted_gated_and_served_like_any_version(spark, swept):
    """The promotion job's path (candidate_result, then publish) registers the xgboost
    run, bars and gates it (the first version: champion); the score job serves it with raw inputs,
    in one process and through predict_batch_udf."""
    import mlflow.pyfunc

    from jobs.scoring.drift import feature_bins
    from jobs.scoring.predictor import make_predict_fn, model_preprocessor, resolve_model, score_features
    from jobs.selection.sweep import candidate_result
    from jobs.tracking import client
    from jobs.training.publish import TrainingRun, publish

    config, lake = swept["config"], swept["lake"]
    run_id = swept["xgboost"]["run_id"]
    result, experiment_id = candidate_result(run_id)
    assert result["model_uri"] == swept["xgboost"]["model_uri"]
    publish(spark, lake, config, RUN_DATE, TrainingRun(run_id, experiment_id, lake.checkpoint("training", RUN_DATE,
                                                                                            "promoted")),
            result, feature_bins(swept["features"], swept["pre"], config.score.drift.bins), swept["dirs"]["holdout"],
            (swept["windows"]["train"], swept["windows"]["holdout"]), validation_dirs=swept["dirs"]["validation"])
    ref, load_uri = resolve_model(config.train.model_name, None)  # the champion
    assert ref.run_id == run_id
    version = client().get_model_version(config.train.model_name, ref.version)
    assert version.tags["gate_decision"] == "promoted"
    assert client().get_run(run_id).data.tags["bar_decision"] == "no baselines configured"

    assert model_preprocessor(load_uri) is None  # no MLP preprocessor: the score job passes raw columns
    inputs = config.features.inputs
    day = spark.read.option("basePath", lake.features).parquet(*swept["dirs"]["holdout"])
    frame = day.select(*inputs).toPandas()
    expected = mlflow.pyfunc.load_model(result["model_uri"]).predict(frame)
    predict = make_predict_fn(load_uri, inputs)()
    np.testing.assert_allclose(predict(*(frame[c].to_numpy() for c in inputs)), expected, rtol=0, atol=1e-12)
    served = score_features(day, config.features, ref, load_uri, 1024, RUN_DATE).select("probability").toPandas()
    np.testing.assert_allclose(np.sort(served["probability"]), np.sort(expected), rtol=0, atol=1e-9)


@pytest.mark.e2e  # the whole train job (in this process, as the replay runs it)
def test_the_train_job_trains_an_xgboost_candidate_of_the_same_training(swept, config_patch, tmp_path):
    """The train job's own entry (what train_candidate's mapped task runs), in this process as the
    replay runs it: ``--family xgboost`` trains a child of the parent with the job's window and
    identity, which are the in-process candidate's (so the sweep and the bar compare them)."""
    from jobs.selection.identity import IDENTITY
    from jobs.selection.sweep import open_parent
    from jobs.tracking import client
    from jobs.training import job as train_job

    config_path = config_patch.write(tmp_path, baselines=[], train={
        "train_days": 2, "validation_days": 1, "holdout_days": 1, "model_name": "xgboost_tests",
        "experiment": "xgboost-tests", "min_category_count": 1, "num_processes": 2})
    parent = open_parent(swept["config"], str(RUN_DATE), [{"name": "xgb-job"}], "a test", TRAINING)
    train_job.main(["--run-date", str(RUN_DATE), "--config", str(config_path), "--lake-root", swept["lake"].root,
                    "--family", "xgboost", "--xgboost-params", '{"n_estimators": 8, "max_depth": 3}',
                    "--candidate-name", "xgb-job", "--parent-run-id", parent, "--training-id", TRAINING])
    mlflow_client = client()
    (child,) = mlflow_client.search_runs([mlflow_client.get_run(parent).info.experiment_id],
                                         f"tags.mlflow.parentRunId = '{parent}'")
    assert child.info.status == "FINISHED" and child.data.tags["model_family"] == "xgboost"
    assert child.data.tags["candidate_name"] == "xgb-job" and child.data.params["n_estimators"] == "8"
    assert child.data.params["train_window"] == swept["windows"]["train"] and child.data.params["num_workers"] == "2"
    assert {key: child.data.tags[key] for key in IDENTITY} == swept["identity"]
    assert "validation_roc_auc" in child.data.metrics and "holdout_roc_auc" in child.data.metrics


@pytest.mark.parametrize(("use_gpu", "device"), [(False, "cpu"), (True, "cuda")])
def test_the_estimator_runs_where_train_use_gpu_says(swept, use_gpu, device):
    """``--use-gpu`` reaches train.use_gpu, which picks XGBoost's device, on ``train.num_processes``
    workers. Only the setting: this machine has no GPU to train on."""
    from jobs.selection.trees import estimator
    from jobs.training.job import parse_args

    args = parse_args(["--run-date", str(RUN_DATE), "--family", "xgboost", "--parent-run-id", "p",
                       "--use-gpu", str(use_gpu).lower(), "--num-processes", "2"])
    found = estimator(PARAMS, swept["pre"], "label", args.config.train.num_processes, args.config.train.use_gpu, 13)
    assert found.getOrDefault("device") == device and found.getOrDefault("num_workers") == 2
    assert found.getOrDefault("n_estimators") == 30 and found.getOrDefault("feature_types")[:4] == ["c"] * 4


def test_an_xgboost_candidate_needs_a_sweep():
    from jobs.training.job import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--run-date", str(RUN_DATE), "--family", "xgboost"])


def test_the_families_of_the_sweep_are_configured(config, config_patch):
    """``sweep.families`` decides which families the sweep trains: an MLP-only config's candidates
    are what they were; one param set of ``sweep.xgboost`` is one candidate over the defaults."""
    from jobs.config import XGBOOST_DEFAULTS, SweepSpec
    from jobs.selection.sweep import candidates

    def sweep_spec(raw):
        return SweepSpec(**{"families": ["mlp"], **raw})

    base = {"learning_rate": 0.003, "epochs": 4, "hyperparameters": {"embedding_dim": 6, "hidden_units": [64, 32]}}
    mlp = candidates(sweep_spec({"size": 2, "learning_rate": [0.003, 0.01]}), base)
    assert [(c["family"], c["learning_rate"]) for c in mlp] == [("mlp", 0.003), ("mlp", 0.01)]
    both = candidates(sweep_spec({"families": ["mlp", "xgboost"], "size": 1, "xgboost": {"max_depth": 3}}), base)
    assert [c["family"] for c in both] == ["mlp", "xgboost"]
    assert both[1]["params"] == {**XGBOOST_DEFAULTS, "max_depth": 3}
    trees = candidates(sweep_spec({"families": ["xgboost"], "xgboost": [{"max_depth": 3}, {"max_depth": 8}]}), base)
    assert [c["params"]["max_depth"] for c in trees] == [3, 8]
    for wrong in ({"families": ["forest"]}, {"families": []}, {"xgboost": []}):
        with pytest.raises(ValueError, match="families|xgboost"):
            sweep_spec(wrong)


def test_a_blend_of_the_families_is_one_more_candidate_of_the_training(spark, swept, config_patch, caplog):
    """``sweep.blend``: the mean of the members' probabilities as a pyfunc of its own (copies of the
    members' models inside, so it needs neither their runs nor Spark), a child of the sweep's parent
    with the training's identity, evaluated by the same report; built once for the same member
    runs; it goes forward only when it beats the sweep's choice on the validation days."""
    import mlflow.pyfunc

    from jobs.metrics import evaluate
    from jobs.selection.bar import read_rows
    from jobs.selection.blend_candidate import MEMBERS_TAG, blend_candidate, preferred
    from jobs.selection.identity import IDENTITY
    from jobs.tracking import client

    config = config_patch.replace(swept["config"], sweep={"families": ["mlp", "xgboost"], "blend": ["xgboost", "mlp"]})
    inputs, label = config.features.inputs, config.features.label
    xgb, mlp = swept["xgboost"]["run_id"], swept["mlp"]
    dirs = {part: swept["dirs"][part] for part in ("validation", "holdout")}
    blend = blend_candidate(spark, config, xgb, RUN_DATE, dirs, swept["windows"]["holdout"])
    run = client().get_run(blend)
    assert run.info.status == "FINISHED" and run.data.tags["model_family"] == "blend"
    assert run.data.tags["mlflow.parentRunId"] == swept["parent"] and run.data.tags[MEMBERS_TAG] == f"{xgb},{mlp}"
    assert {key: run.data.tags[key] for key in IDENTITY} == swept["identity"]
    assert run.data.tags["candidate_name"] == "blend(xgboost+mlp)" and "validation_roc_auc" in run.data.metrics

    holdout = read_rows(spark, swept["dirs"]["holdout"], inputs, label)
    members = [mlflow.pyfunc.load_model(client().get_run(r).data.tags["model_uri"]).predict(holdout[inputs])
               for r in (xgb, mlp)]
    mine = mlflow.pyfunc.load_model(run.data.tags["model_uri"]).predict(holdout[inputs])
    np.testing.assert_allclose(mine, (np.asarray(members[0]) + np.asarray(members[1])) / 2, rtol=0, atol=1e-12)
    assert run.data.metrics["holdout_roc_auc"] == pytest.approx(evaluate(holdout[label], mine)["roc_auc"], abs=1e-12)
    assert not np.allclose(members[0], members[1])  # two models, not one twice

    assert blend_candidate(spark, config, xgb, RUN_DATE, dirs, swept["windows"]["holdout"]) == blend  # not twice
    scores = {r: client().get_run(r).data.metrics["validation_roc_auc"] for r in (xgb, blend)}
    chosen = preferred(config, client(), xgb, blend)
    assert chosen == (blend if scores[blend] > scores[xgb] else xgb)
    assert client().get_run(blend).data.tags["blend_decision"].startswith(f"validation_roc_auc {scores[blend]:.4f}")
    assert preferred(config, client(), xgb, None) == xgb

    # validation days of one class have no ROC AUC: the sweep chose by log loss, and so does the blend
    parent, logged = swept["parent"], client().get_run(swept["parent"]).data.tags.get("chosen_by")
    client().set_tag(parent, "chosen_by", "validation_log_loss")
    try:
        losses = {r: client().get_run(r).data.metrics["validation_log_loss"] for r in (xgb, blend)}
        assert preferred(config, client(), xgb, blend) == (blend if losses[blend] < losses[xgb] else xgb)
        assert client().get_run(blend).data.tags["blend_decision"].startswith(
            f"validation_log_loss {losses[blend]:.4f}")
        assert blend_candidate(spark, config, xgb, RUN_DATE, dirs, swept["windows"]["holdout"]) == blend
    finally:
        if logged is None:
            client().delete_tag(parent, "chosen_by")
        else:
            client().set_tag(parent, "chosen_by", logged)

    caplog.set_level("WARNING", logger="jobs.selection.blend_candidate")
    unknown = config_patch.replace(config, sweep={"blend": ["xgboost", "logistic_regression"]})
    assert blend_candidate(spark, unknown, xgb, RUN_DATE, dirs, swept["windows"]["holdout"]) is None
    assert "'logistic_regression' is neither a sweep family (mlp, xgboost) nor a baseline of this training " \
           "(configured: none)" in caplog.text
