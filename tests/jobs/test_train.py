from __future__ import annotations

import datetime as dt

from jobs.config import FeatureSpec
from jobs.train import fit_preprocessor, split_window


def test_split_window_puts_the_holdout_last():
    train, holdout = split_window(dt.date(2013, 1, 10), 7, 3)
    assert train[0] == dt.date(2013, 1, 1) and train[-1] == dt.date(2013, 1, 7)
    assert holdout == [dt.date(2013, 1, 8), dt.date(2013, 1, 9), dt.date(2013, 1, 10)]


def test_fit_preprocessor_uses_labelled_rows_and_frequent_categories(spark):
    spec = FeatureSpec(builder="x:y", id_columns=[], categorical=["carrier"], numeric=["distance", "engines"],
                       label="label")
    df = spark.createDataFrame(
        [("UA", 100.0, 2.0, 1.0), ("UA", 300.0, 2.0, 0.0), ("AA", 200.0, 2.0, 0.0),
         ("AA", 200.0, 2.0, 1.0), ("B6", 200.0, 2.0, 1.0), ("DL", 9999.0, 2.0, None), ("DL", 9999.0, 2.0, None)],
        "carrier string, distance double, engines double, label double",
    )
    pre = fit_preprocessor(df, spec, min_count=2)
    assert pre.vocab == {"carrier": ["AA", "UA"]}  # B6 is rare; DL only in unlabelled rows
    assert pre.mean["distance"] == 200.0
    assert round(pre.std["distance"], 6) == round((20000 / 5) ** 0.5, 6)
    assert pre.std["engines"] == 1.0  # a constant column is not divided by zero


def test_shards_are_disjoint_cover_every_row_group_and_are_stable(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.train import shard_units

    dirs = []
    for day, groups in (("2013-01-01", 3), ("2013-01-02", 1), ("2013-01-03", 2)):
        folder = tmp_path / f"date={day}"
        folder.mkdir()
        pq.write_table(pa.table({"x": list(range(groups * 10))}), folder / "part-0.parquet", row_group_size=10)
        dirs.append(str(folder))
    everything = shard_units(dirs, 0, 1)
    assert len(everything) == 6
    for world in (2, 3, 4):
        shares = [shard_units(dirs, rank, world) for rank in range(world)]
        assert sorted(u for share in shares for u in share) == sorted(everything)
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        assert shares == [shard_units(dirs, rank, world) for rank in range(world)]


def test_distributed_training_is_deterministic_and_sees_every_row_once(spark, lake, config, tmp_path):
    import mlflow
    from pyspark.ml.torch.distributor import TorchDistributor

    from jobs.features import build_features, read_inputs, write_features
    from jobs.tracking import ensure_experiment
    from jobs.train import train_fn

    days = [dt.date(2013, 1, d) for d in (2, 3, 4, 5)]
    features = build_features(read_inputs(spark, lake, config, days), config)
    write_features(features, str(tmp_path / "features"))
    dirs = [str(tmp_path / "features" / f"date={d}") for d in days]
    label = config.features.label
    pre = fit_preprocessor(spark.read.parquet(*dirs[:3]), config.features, min_count=1)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    experiment = ensure_experiment("train-tests")  # artifacts under the test home, not ./mlruns

    def train() -> tuple[dict, str]:
        run_id = mlflow.MlflowClient().create_run(experiment).info.run_id
        job = {"run_id": run_id, "tracking_uri": uri, "preprocessor": pre.to_json(), "train_dirs": dirs[:3],
               "holdout_dirs": dirs[3:], "label": label, "hyper": {"embedding_dim": 4, "hidden_units": [8]},
               "epochs": 2, "batch_size": 256, "learning_rate": 0.01, "seed": 5, "use_gpu": False,
               "threads_per_process": 1}
        result = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train_fn, job)
        return result, run_id

    (first, first_run), (second, _) = train(), train()
    assert first["metrics"] == second["metrics"]
    assert first["model_uri"] != second["model_uri"]
    labelled = spark.read.parquet(*dirs[:3]).where(f"{label} IS NOT NULL").count()
    run = mlflow.MlflowClient().get_run(first_run)
    assert run.data.metrics["train_rows"] == labelled
    assert run.info.status == "RUNNING"  # the driver finishes it after registering the model
