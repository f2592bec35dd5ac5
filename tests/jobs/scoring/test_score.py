"""Scoring: make_predict_fn without Spark, and Spark's predictions against single-process ones."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest

from jobs.lake.layout import partition_name

DAY = dt.date(2013, 1, 6)


@pytest.fixture(scope="module")
def scored_model(features_zone, config, tmp_path_factory):
    """A model logged to a throw-away MLflow store, with real features of DAY to score."""
    import mlflow
    import torch

    from jobs.model.tabular import build_net, log_pyfunc
    from jobs.tracking import ensure_experiment
    from jobs.training.data import fit_preprocessor

    features = features_zone.frame([DAY]).cache()
    pre = fit_preprocessor(features, config.features, min_count=1)
    hyper = {"embedding_dim": 4, "hidden_units": [8]}
    torch.manual_seed(1)
    net = build_net(pre, hyper)
    home = tmp_path_factory.mktemp("mlflow")
    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
    mlflow.set_experiment(experiment_id=ensure_experiment("score-tests"))  # artifacts under the test home
    frame = features.toPandas()
    with mlflow.start_run():
        info = log_pyfunc(net, pre, hyper, frame.head(5))
    # Like the score job: workers load from the artifact location, not through the registry.
    location = mlflow.MlflowClient().get_logged_model(info.model_id).artifact_location
    return {"uri": location, "model_uri": info.model_uri, "net": net, "pre": pre, "features": features,
            "frame": frame, "tracking_uri": mlflow.get_tracking_uri()}


def test_make_predict_fn_is_numpy_in_numpy_out_and_matches_the_model(scored_model, config):
    import mlflow.pyfunc

    from jobs.model.tabular import predict_proba
    from jobs.scoring.predictor import make_predict_fn

    frame = scored_model["frame"]
    inputs = config.features.inputs
    predict = make_predict_fn(scored_model["uri"], inputs)()
    got = predict(*[frame[c].to_numpy() for c in inputs])
    assert isinstance(got, np.ndarray) and got.shape == (len(frame),)
    direct = predict_proba(scored_model["net"], scored_model["pre"], frame)
    np.testing.assert_allclose(got, direct, rtol=0, atol=1e-6)
    pyfunc = mlflow.pyfunc.load_model(scored_model["uri"]).predict(frame[inputs])
    np.testing.assert_allclose(got, pyfunc, rtol=0, atol=1e-6)
    assert frame[inputs].isna().any().any(), "the real rows include missing values the model must handle"


def test_the_model_loads_on_the_device_its_model_config_names(scored_model):
    import mlflow.pyfunc

    # "meta" is a device every torch build has: proof the weights go where model_config says.
    model = mlflow.pyfunc.load_model(scored_model["uri"], model_config={"device": "meta"}).unwrap_python_model()
    assert {p.device.type for p in model.net.parameters()} == {"meta"}
    default = mlflow.pyfunc.load_model(scored_model["uri"]).unwrap_python_model()
    assert {p.device.type for p in default.net.parameters()} == {"cpu"}


def test_gpu_scoring_without_a_gpu_says_there_is_none(spark, scored_model, config, tmp_path):
    """Without a GPU: a clear error, never a silent fall back to the CPU: from a Python worker's
    prediction function, and from the score job's driver (local master) before it scores."""
    import torch

    from jobs.scoring.job import main
    from jobs.scoring.predictor import make_predict_fn, worker_device

    if torch.cuda.is_available():
        pytest.skip("a GPU here: test_gpu_scoring_equals_the_cpu runs instead")
    assert worker_device(False) == "cpu"
    with pytest.raises(RuntimeError, match="no CUDA device.*--use-gpu false"):
        make_predict_fn(scored_model["uri"], config.features.inputs, use_gpu=True)()
    with pytest.raises(RuntimeError, match=r"GPU scoring \(--use-gpu true.*no CUDA device.*--use-gpu false"):
        main(["--run-date", "2013-01-10", "--lake-root", str(tmp_path / "lake"), "--use-gpu", "true"])


@pytest.mark.gpu
def test_gpu_scoring_equals_the_cpu(scored_model, config):
    """On a GPU machine: the same probabilities as on the CPU, from both prediction functions."""
    from jobs.scoring.predictor import make_predict_fn, worker_device

    frame, inputs = scored_model["frame"], config.features.inputs
    arrays = [frame[c].to_numpy() for c in inputs]
    on_cpu = make_predict_fn(scored_model["uri"], inputs, use_gpu=False)()(*arrays)
    assert worker_device(False) == "cpu"
    assert worker_device(True) == "cuda:0"  # outside a Spark task: no GPU assigned, the first one
    on_gpu = make_predict_fn(scored_model["uri"], inputs, use_gpu=True)()(*arrays)
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=0, atol=1e-5)
    encoded = encoded_arrays(scored_model["pre"], frame)
    on_gpu_encoded = make_encoded_predict_fn_for(scored_model, use_gpu=True)(*encoded)
    np.testing.assert_allclose(on_gpu_encoded, on_cpu, rtol=0, atol=1e-5)


def encoded_arrays(pre, frame) -> list[np.ndarray]:
    """What Spark hands the encoded predict function: one array per code, then per z-score."""
    cats, nums = pre.encode(frame)
    return [*(cats[:, j].astype(np.int32) for j in range(cats.shape[1])), *(nums[:, j] for j in range(nums.shape[1]))]


def make_encoded_predict_fn_for(scored_model, use_gpu: bool = False):
    from jobs.scoring.predictor import make_encoded_predict_fn

    pre = scored_model["pre"]
    return make_encoded_predict_fn(scored_model["uri"], len(pre.categorical), len(pre.numeric), use_gpu)()


def test_the_encoded_predict_function_equals_the_pyfunc_on_raw_rows(scored_model, config):
    from jobs.model.tabular import predict_proba

    frame, pre = scored_model["frame"], scored_model["pre"]
    predict = make_encoded_predict_fn_for(scored_model)
    expected = predict_proba(scored_model["net"], pre, frame)
    np.testing.assert_allclose(predict(*encoded_arrays(pre, frame)), expected, rtol=0, atol=1e-6)
    # the input buffers are reused: a smaller batch after a bigger one gets its own rows' answers
    small = frame.iloc[:7]
    np.testing.assert_allclose(predict(*encoded_arrays(pre, small)), predict_proba(scored_model["net"], pre, small),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("ranged", [False, True], ids=["no range", "training range"])
def test_spark_encodes_inputs_exactly_as_the_preprocessor_does(spark, ranged):
    import warnings

    from jobs.model.tabular import Z_LIMIT, Preprocessor
    from jobs.scoring.predictor import encoded_columns

    # with a training range: seats' numbers outside 1..4 at its ends, distance's above 200 at 200
    ranges = {"low": {"seats": 1.0}, "high": {"distance": 200.0, "seats": 4.0}} if ranged else {}
    pre = Preprocessor(categorical=["carrier", "tailnum"], numeric=["distance", "seats"],
                       vocab={"carrier": ["AA", "UA"], "tailnum": []}, mean={"distance": 1000.0 / 3, "seats": 2.0},
                       std={"distance": 7.0, "seats": 1.0}, **ranges)
    rows = [("UA", "N1", 150.0, 3), ("ZZ", None, float("nan"), None), (None, "N2", float("inf"), 1),
            ("AA", "N3", -float("inf"), 0), ("AA", "N4", 1e300, 2), ("UA", None, None, 5)]
    df = spark.createDataFrame(rows, "carrier string, tailnum string, distance double, seats int")
    got = df.select(*encoded_columns(json.loads(pre.to_json()))).toPandas()
    frame = df.toPandas()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow on the way to float32
        cats, nums = pre.encode(frame)
    assert np.isfinite(nums).all()
    if ranged:  # 1e300 at 200, 150 as it is; infinities still at 0 (not numbers to clip); seats 0 -> 1, 5 -> 4
        assert nums[4, 0] == np.float32((200.0 - 1000.0 / 3) / 7.0) and nums[2, 0] == nums[3, 0] == 0
        assert nums[0, 0] == np.float32((150.0 - 1000.0 / 3) / 7.0)
        assert nums[:, 1].tolist() == [1.0, 0.0, -1.0, -1.0, 0.0, 2.0]
    else:
        assert nums[4, 0] == Z_LIMIT  # 1e300: clipped, not infinite
    np.testing.assert_array_equal(got.iloc[:, :2].to_numpy(), cats)
    np.testing.assert_array_equal(got.iloc[:, 2:].to_numpy(), nums)  # bit for bit: float64 z, then float32
    assert got.dtypes.tolist() == [np.int32, np.int32, np.float32, np.float32]


def test_the_score_job_finds_the_preprocessor_a_logged_model_carries(scored_model, tmp_path):
    from jobs.model.tabular import PREPROCESSOR_FILE
    from jobs.scoring.predictor import PREPROCESSOR_ARTIFACT, model_preprocessor

    assert PREPROCESSOR_ARTIFACT.endswith(f"/{PREPROCESSOR_FILE}")
    assert model_preprocessor(scored_model["uri"]) == json.loads(scored_model["pre"].to_json())
    assert model_preprocessor(str(tmp_path)) is None  # any other pyfunc: scored on raw columns
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "preprocessor.json").write_text("{not json")
    with pytest.raises(ValueError):  # listed but unreadable: never a quiet switch to raw columns
        model_preprocessor(str(tmp_path))


@pytest.mark.parametrize("encoded", [False, True], ids=["raw-columns", "encoded-by-spark"])
def test_spark_predictions_equal_single_process_predictions(scored_model, config, encoded):
    from jobs.model.tabular import predict_proba
    from jobs.scoring.predictor import score_features
    from jobs.tracking import ModelRef

    ref = ModelRef(name="flight_delay", version="7", run_id="abc")
    preprocessor = json.loads(scored_model["pre"].to_json()) if encoded else None
    out = score_features(scored_model["features"], config.features, ref, scored_model["uri"], batch_size=100,
                         run_date=DAY, preprocessor=preprocessor)
    keys = ["carrier", "flight", "origin", "sched_dep_time"]
    spark_rows = out.toPandas().sort_values(keys).reset_index(drop=True)
    frame = scored_model["frame"].sort_values(keys).reset_index(drop=True)
    assert len(spark_rows) == len(frame)
    assert not spark_rows.duplicated(keys).any()
    expected = predict_proba(scored_model["net"], scored_model["pre"], frame)
    np.testing.assert_allclose(spark_rows["probability"].to_numpy(), expected, rtol=0, atol=1e-6)
    assert set(spark_rows["model_version"]) == {"7"} and set(spark_rows["model_run_id"]) == {"abc"}
    assert (spark_rows["date"] == DAY).all() and (spark_rows["run_date"] == DAY).all()


def test_scoring_tasks_merge_a_small_read_and_leave_a_big_one_as_spark_split_it(spark):
    """``score.rows_per_task``: ``ceil(rows / rows_per_task)`` partitions at most, never more than
    Spark read (a coalesce merges, it does not split), and 0 leaves the read as it is."""
    from jobs.scoring.predictor import scoring_tasks

    rows = spark.range(10).repartition(3)
    assert rows.rdd.getNumPartitions() == 3
    for rows_per_task, partitions in ((100, 1), (5, 2), (4, 3), (1, 3), (0, 3)):
        merged = scoring_tasks(rows, rows_per_task)
        assert merged.rdd.getNumPartitions() == partitions, rows_per_task
        assert sorted(r.id for r in merged.collect()) == list(range(10))


@pytest.mark.parametrize("rows_per_task", [500_000, 0], ids=["small-day-merged", "spark-split"])
def test_a_small_day_is_scored_by_one_task_so_one_python_worker_loads_the_model(scored_model, config, rows_per_task):
    """The score job's scoring pass over a day of a few hundred flights read in three partitions
    runs as one task (one Python worker imports torch and loads the model, not one per core), with
    the predictions of the three; ``rows_per_task: 0`` keeps Spark's three."""
    import dataclasses

    from jobs.config import ShiftSpec
    from jobs.scoring.predictor import model_preprocessor, served_predictions
    from jobs.tracking import ModelRef

    score = dataclasses.replace(config.score, recent_shift=ShiftSpec(days=0), rows_per_task=rows_per_task)
    features = scored_model["features"].repartition(3)
    ref, pre = ModelRef("score-tests", "1", "run"), model_preprocessor(scored_model["uri"])
    with served_predictions(None, None, dataclasses.replace(config, score=score), features, [DAY], ref,
                            scored_model["uri"], pre, 4096) as (predictions, shifts):
        assert shifts == {}
        assert predictions.rdd.getNumPartitions() == (1 if rows_per_task else 3)
        served = predictions.select("probability").toPandas()["probability"]
    assert len(served) == scored_model["features"].count() and served.between(0.0, 1.0).all()


def test_the_preprocessor_a_model_carries_bins_the_window_as_the_one_fitted_for_it(scored_model, config):
    """What the promotion job bins the window with where no baseline logged its
    bins: the chosen model's own preprocessor, read back from its files, gives the bins of the
    preprocessor fitted on the window (so nothing is fitted again)."""
    import json

    from jobs.model.tabular import Preprocessor
    from jobs.scoring.drift import feature_bins
    from jobs.scoring.predictor import model_preprocessor

    logged = Preprocessor(**model_preprocessor(scored_model["uri"]))
    assert logged == scored_model["pre"]
    for local_max_rows in (0, 10**6):  # binned by Spark and in this process
        bins = [feature_bins(scored_model["features"], pre, config.score.drift.bins, local_max_rows)
                for pre in (logged, scored_model["pre"])]
        assert bins[0]["rows"] > 100 and json.dumps(bins[0], sort_keys=True) == json.dumps(bins[1], sort_keys=True)


@pytest.mark.slow
def test_rescoring_a_day_replaces_its_partition_and_leaves_other_days(
    scored_model, spark, features_zone, config, tmp_path, monkeypatch
):
    import mlflow
    import pyarrow.parquet as pq

    from jobs.scoring.job import main

    other = dt.date(2013, 1, 7)
    scoring_lake = tmp_path / "lake"
    features_zone.copy([DAY, other], scoring_lake / "features")
    client = mlflow.MlflowClient()  # the fixture's store
    name = config.train.model_name
    version = mlflow.register_model(scored_model["model_uri"], name).version
    client.set_registered_model_alias(name, "champion", version)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow.get_tracking_uri())

    main(["--run-date", other.isoformat(), "--lake-root", str(scoring_lake)])
    main(["--run-date", DAY.isoformat(), "--lake-root", str(scoring_lake)])
    before = pq.read_table(scoring_lake / "predictions" / partition_name(other)).to_pandas()
    main(["--run-date", DAY.isoformat(), "--lake-root", str(scoring_lake)])  # a retry
    after = pq.read_table(scoring_lake / "predictions" / partition_name(DAY)).to_pandas()

    assert len(after) == len(scored_model["frame"])  # replaced, not appended
    assert not after.duplicated(["carrier", "flight", "origin", "sched_dep_time"]).any()
    assert set(after["model_version"]) == {str(version)}
    untouched = pq.read_table(scoring_lake / "predictions" / partition_name(other)).to_pandas()
    assert untouched.equals(before)

    # the day's raw data is re-delivered and fails validation: its old features are not served
    from jobs.lake.layout import Lake
    from jobs.validation.partitions import FailedValidationError, mark_failed

    mark_failed(spark, Lake(str(scoring_lake)), config.validation.feed, DAY, "redelivery", ["row_count: 3 rows"],
                "report.md")
    with pytest.raises(FailedValidationError, match=f"not scoring {DAY}: its features were built before"):
        main(["--run-date", DAY.isoformat(), "--lake-root", str(scoring_lake)])
    served = pq.read_table(scoring_lake / "predictions" / partition_name(DAY)).to_pandas()
    assert served.equals(after)  # refused before anything was written


@pytest.mark.slow
def test_days_scored_in_one_pass_equal_each_day_scored_alone(scored_model, features_zone, config, config_patch,
                                                             tmp_path, monkeypatch):
    """``--days 2``: one Spark pass over two days writes, per day, the predictions, the drift
    report and the summary that two one-day runs write (the replay and backfills rely on it).
    The one-day runs draw no drift plot (``score.drift.plot: false``, as the replay scores): the
    report is the same, and a plot an earlier scoring left is removed, not left beside it."""
    import mlflow
    import pandas as pd

    from jobs.model.tabular import log_pyfunc
    from jobs.scoring.drift import BASELINE_ARTIFACT, build_baseline
    from jobs.scoring.job import main

    days = [DAY, DAY + dt.timedelta(days=1)]
    together, alone = tmp_path / "together", tmp_path / "alone"
    features_zone.copy(days, together / "features")
    alone.mkdir()
    (alone / "features").symlink_to(together / "features")
    frame, pre = scored_model["frame"], scored_model["pre"]
    with mlflow.start_run() as run:  # a model with a drift baseline, so the days' drift is measured too
        info = log_pyfunc(scored_model["net"], pre, {"embedding_dim": 4, "hidden_units": [8]}, frame.head(5))
        probabilities = mlflow.pyfunc.load_model(info.model_uri).predict(frame[config.features.inputs])
        mlflow.log_dict(build_baseline(scored_model["features"], pre, probabilities), BASELINE_ARTIFACT)
    name = config.train.model_name
    version = mlflow.register_model(info.model_uri, name).version
    mlflow.MlflowClient().set_registered_model_alias(name, "champion", version)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow.get_tracking_uri())

    main(["--run-date", days[-1].isoformat(), "--days", str(len(days)), "--lake-root", str(together)])
    no_plot = config_patch.write(tmp_path / "no-plot", score={"drift": {"plot": False}})
    stale = alone / "reports" / "drift" / partition_name(days[0]) / "drift.png"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an earlier scoring's plot")
    for day in days:
        main(["--run-date", day.isoformat(), "--lake-root", str(alone), "--config", str(no_plot)])

    ids = ["carrier", "flight", "origin", "sched_dep_time"]
    for day in days:
        one, other = (pd.read_parquet(root / "predictions" / partition_name(day)).drop(columns="scored_at")
                      .sort_values(ids).reset_index(drop=True) for root in (together, alone))
        assert len(one) > 100 and set(one["run_date"]) == {day} and set(one["model_run_id"]) == {run.info.run_id}
        pd.testing.assert_frame_equal(one, other)
        drift = [json.loads((root / "reports" / "drift" / partition_name(day) / "drift.json").read_text())
                 for root in (together, alone)]
        assert drift[0] == drift[1] and drift[0]["rows"] == len(one)
        plots = [root / "reports" / "drift" / partition_name(day) / "drift.png" for root in (together, alone)]
        assert plots[0].read_bytes()[:4] == b"\x89PNG" and not plots[1].exists()
        summaries = [json.loads((root / "reports" / "scoring" / partition_name(day) / "summary.json").read_text())
                     for root in (together, alone)]
        for summary in summaries:
            summary.pop("path")
            summary["drift"].pop("report")
        # a batch of two days and one of a day alone may round a probability a float32 ulp apart
        # (CI saw 0.5910665323742881 against ...3026478): the mean agrees to that, the rest exactly
        means = [summary.pop("mean_probability") for summary in summaries]
        assert means[0] == pytest.approx(means[1], rel=1e-6, abs=0) and 0 < means[0] < 1
        assert summaries[0] == summaries[1] and summaries[0]["rows"] == len(one)
    # the first day is the second's reference day, scored in the same pass as it: shifted all the same
    second = json.loads((together / "reports" / "scoring" / partition_name(days[1]) / "summary.json").read_text())
    assert second["recent_shift"]["days"] == [days[0].isoformat()] and "solved" in second["recent_shift"], second
    assert len({json.dumps(d["features"]) for d in (
        json.loads((together / "reports" / "drift" / partition_name(day) / "drift.json").read_text())
        for day in days)}) == len(days)  # each day judged on its own rows, not the days pooled


def test_scoring_without_a_champion_says_how_to_get_one(tmp_path, monkeypatch):
    from jobs.tracking import NoModelError, champion_version

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/empty.db")
    monkeypatch.setenv("PIPELINE_NAME", "flights")  # as a DAG's job: its messages name the pipeline's DAGs
    with pytest.raises(NoModelError, match="flights_train"):
        champion_version("flight_delay")


def damaged_champion(scored_model, config, tmp_path, damage: str):
    """A lake with DAY's features and a predictions partition of DAY scored earlier (its bytes), and in
    the fixture's registry a former champion whose files are intact and a newer version damaged as
    ``damage`` says (``folder``: its artifact folder deleted; ``weights``: its weights file deleted;
    ``empty``: its weights file truncated to nothing), made champion. Returns what the test needs."""
    import shutil
    from pathlib import Path
    from urllib.parse import urlparse

    import mlflow

    from jobs.model.tabular import MODEL_FILE, log_pyfunc

    mlflow.set_tracking_uri(scored_model["tracking_uri"])  # a test before may have pointed the process elsewhere
    client, name = mlflow.MlflowClient(), config.train.model_name
    former = mlflow.register_model(scored_model["model_uri"], name).version
    client.set_model_version_tag(name, former, "gate_decision", "promoted")  # a former champion
    with mlflow.start_run():
        info = log_pyfunc(scored_model["net"], scored_model["pre"], {"embedding_dim": 4, "hidden_units": [8]},
                          scored_model["frame"].head(5))
    version = str(mlflow.register_model(info.model_uri, name).version)
    client.set_registered_model_alias(name, "champion", version)
    uri = client.get_model_version_download_uri(name, version)
    folder = Path(urlparse(uri).path)
    if damage == "folder":
        shutil.rmtree(folder)
    elif damage == "weights":
        (folder / "artifacts" / MODEL_FILE).unlink()
    else:
        (folder / "artifacts" / MODEL_FILE).write_bytes(b"")
    lake = tmp_path / "lake"
    served = lake / "predictions" / partition_name(DAY) / "part-00000.parquet"
    served.parent.mkdir(parents=True)
    served.write_bytes(b"the day's predictions, scored earlier")
    return {"lake": lake, "name": name, "version": version, "former": str(former), "uri": uri,
            "predictions": {str(p): p.read_bytes() for p in (lake / "predictions").rglob("*") if p.is_file()}}


@pytest.mark.parametrize("damage", ["folder", "weights"])
def test_a_champion_whose_files_are_gone_stops_the_score_job_as_a_data_error_naming_it(
        scored_model, features_zone, config, tmp_path, monkeypatch, caplog, damage):
    """Exit 65 before any Spark work, one line naming the model, the version, its artifact URI and
    the command that moves the alias to the former champion; the predictions zone untouched."""
    import mlflow

    from jobs.errors import DATA_ERROR_EXIT
    from jobs.runner import run_job
    from jobs.scoring.job import main

    found = damaged_champion(scored_model, config, tmp_path, damage)
    features_zone.copy([DAY], found["lake"] / "features")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow.get_tracking_uri())
    with pytest.raises(SystemExit) as failed:
        run_job(lambda: main(["--run-date", DAY.isoformat(), "--lake-root", str(found["lake"])]))
    assert failed.value.code == DATA_ERROR_EXIT
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("data error")]
    name, version, former = found["name"], found["version"], found["former"]
    assert f"model {name!r} version {version} (the champion) cannot be loaded" in line, line
    assert found["uri"] in line
    assert ("no files there" if damage == "folder" else "artifacts/model_state.pt is missing") in line, line
    assert f"set_registered_model_alias({name!r}, 'champion', {former!r})" in line, line
    assert f"MlflowClient({mlflow.get_tracking_uri()!r})" in line
    assert not any("PythonException" in r.getMessage() for r in caplog.records)
    assert {str(p): p.read_bytes() for p in (found["lake"] / "predictions").rglob("*") if p.is_file()} == \
        found["predictions"]
    assert not (found["lake"] / "reports").exists()


def test_a_damaged_version_asked_for_with_model_version_is_a_data_error_naming_it(
        scored_model, features_zone, config, tmp_path, monkeypatch):
    """``--model-version`` of a version whose weights file is empty (truncated): the data error says
    to score with another version; a version the registry does not have says so too."""
    import mlflow

    from jobs.registry import DamagedModelError
    from jobs.scoring.job import main
    from jobs.tracking import NoModelError

    found = damaged_champion(scored_model, config, tmp_path, "empty")
    features_zone.copy([DAY], found["lake"] / "features")
    mlflow.MlflowClient().set_registered_model_alias(found["name"], "champion", found["former"])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow.get_tracking_uri())
    run = ["--run-date", DAY.isoformat(), "--lake-root", str(found["lake"])]
    with pytest.raises(DamagedModelError) as failed:
        main([*run, "--model-version", found["version"]])
    said = str(failed.value)
    assert f"version {found['version']} (asked for with --model-version) cannot be loaded" in said, said
    assert found["uri"] in said and "artifacts/model_state.pt is empty" in said
    assert f"--model-version {found['former']}" in said and "leave --model-version out" in said
    with pytest.raises(NoModelError, match="has no version 9999 \\(--model-version\\)"):
        main([*run, "--model-version", "9999"])
    assert {str(p): p.read_bytes() for p in (found["lake"] / "predictions").rglob("*") if p.is_file()} == \
        found["predictions"]


def turned_labels(features_zone, zone, days: list[dt.date], label: str) -> None:
    """``days``' partitions of the features zone ``zone`` rewritten from the session's with every
    outcome turned around (late <-> on time); their inputs untouched."""
    import shutil

    from pyspark.sql import functions as F

    for day in days:
        target = zone / partition_name(day)
        shutil.rmtree(target)
        rows = features_zone.spark.read.parquet(str(features_zone.path / partition_name(day)))
        rows.withColumn(label, (1 - F.col(label)).cast(rows.schema[label].dataType)).coalesce(1) \
            .write.parquet(str(target))


@pytest.mark.slow
def test_a_days_level_follows_the_landed_outcomes_before_it_and_never_its_own(
        scored_model, features_zone, config, tmp_path, monkeypatch):
    """``score.recent_shift`` (on by default): day D's probabilities are the model's, moved by one
    logit intercept that makes the model's mean probability over the landed days before it (here
    D - 7..D - 1, each day's rows weighted ``2 ** (-age / half_life_days)``) equal their realized
    rate, so its ranking within the day stays the model's. Turning around the outcomes of
    D and the day after moves none of D's predictions; turning around D - 1's moves their level."""
    import mlflow
    import pandas as pd

    from jobs.model.tabular import predict_proba
    from jobs.scoring.job import main
    from jobs.scoring.shift import served_probability

    day, label = dt.date(2013, 1, 8), config.features.label
    days = [day - dt.timedelta(days=k) for k in range(7, -2, -1)]  # D - 7 .. D + 1
    mlflow.set_tracking_uri(scored_model["tracking_uri"])
    name = config.train.model_name
    version = mlflow.register_model(scored_model["model_uri"], name).version
    mlflow.MlflowClient().set_registered_model_alias(name, "champion", version)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", scored_model["tracking_uri"])
    ids = ["carrier", "flight", "origin", "sched_dep_time"]

    def scored(changed: list[dt.date]) -> tuple[pd.DataFrame, dict]:
        root = tmp_path / "-".join(str(d) for d in changed) if changed else tmp_path / "as-landed"
        features_zone.copy(days, root / "features")
        turned_labels(features_zone, root / "features", changed, label)
        main(["--run-date", day.isoformat(), "--lake-root", str(root)])
        rows = pd.read_parquet(root / "predictions" / partition_name(day)).sort_values(ids).reset_index(drop=True)
        summary = json.loads((root / "reports" / "scoring" / partition_name(day) / "summary.json").read_text())
        return rows, summary["recent_shift"]

    rows, shift = scored([])
    earlier = features_zone.frame(days[:7]).toPandas()
    earlier = earlier[earlier[label].notna()]
    assert shift["days"] == [d.isoformat() for d in days[:7]] and shift["rows"] == len(earlier)
    half_life = config.score.recent_shift.half_life_days
    assert half_life > 0 and shift["half_life_days"] == half_life
    each = [features_zone.frame([d]).toPandas() for d in days[:7]]
    weight = np.concatenate([np.full(int(f[label].notna().sum()), 0.5 ** ((days[6] - d).days / half_life))
                             for d, f in zip(days[:7], each, strict=True)])  # D - 1 weighs 1, D - 5 weighs 1/2
    earlier = pd.concat([f[f[label].notna()] for f in each])
    assert shift["realized_rate"] == pytest.approx(np.average(earlier[label], weights=weight), abs=1e-6)
    assert shift["realized_rate"] != pytest.approx(earlier[label].mean(), abs=1e-4)  # the days are weighted
    model_mean = np.average(predict_proba(scored_model["net"], scored_model["pre"], earlier), weights=weight)
    assert shift["predicted_rate"] == pytest.approx(model_mean, abs=2e-3)  # the bins' centres
    assert abs(shift["logit_shift"]) > 0.1  # an untrained net: far from the flights' rate
    frame = features_zone.frame([day]).toPandas().sort_values(ids).reset_index(drop=True)
    logit = np.log(p := predict_proba(scored_model["net"], scored_model["pre"], frame)) - np.log1p(-p)
    expected = 1 / (1 + np.exp(-(logit + shift["logit_shift"])))
    np.testing.assert_allclose(rows["probability"].to_numpy(), expected, rtol=0, atol=1e-6)
    # the day's order is the model's: the shift is one number for all of the day's flights
    assert (np.argsort(rows["probability"].to_numpy(), kind="stable")
            == np.argsort(np.round(expected, 9), kind="stable")).mean() > 0.99
    # each row says what made it: the registered version's own probability for the row's features,
    # read again here with MLflow outside Spark, and the day's shift; together the served number
    pyfunc = mlflow.pyfunc.load_model(f"models:/{name}/{version}")
    pre = scored_model["pre"]
    own = np.asarray(pyfunc.predict(frame[[*pre.categorical, *pre.numeric]]), dtype=np.float64).ravel()
    np.testing.assert_allclose(rows["model_probability"].to_numpy(), own, rtol=0, atol=1e-6)
    assert (rows["logit_shift"] == shift["logit_shift"]).all()
    np.testing.assert_allclose(served_probability(rows["model_probability"], rows["logit_shift"]),
                               rows["probability"].to_numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(served_probability(own, shift["logit_shift"]), rows["probability"].to_numpy(),
                               rtol=0, atol=1e-6)

    unseen, unseen_shift = scored([day, day + dt.timedelta(days=1)])
    pd.testing.assert_series_equal(unseen["probability"], rows["probability"])
    assert unseen_shift == shift
    landed, landed_shift = scored([day - dt.timedelta(days=1)])
    assert landed_shift["realized_rate"] != shift["realized_rate"]
    assert landed_shift["logit_shift"] != shift["logit_shift"]
    assert not np.allclose(landed["probability"], rows["probability"])
    np.testing.assert_array_equal(landed["probability"].rank().to_numpy(), rows["probability"].rank().to_numpy())
