"""The Spark contenders beside the score job: the same output through other paths (raw columns to
the pyfunc, ``mapInArrow``), and the floors without a model (read+write, a no-op pandas UDF)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from jobs.config import FeatureSpec
from jobs.lake.layout import PARTITION
from jobs.scoring.predictor import prediction_columns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from jobs.tracking import ModelRef

SESSION = {"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
DEFAULT_ARROW_BATCH = 10000


def raw_udf(spec: FeatureSpec, load_uri: str, batch_size: int) -> Column:
    """The pyfunc on the raw feature columns (what any MLflow pyfunc takes): the score job's path for a
    model without a Preprocessor."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType

    from jobs.scoring.predictor import make_predict_fn

    predict = predict_batch_udf(make_predict_fn(load_uri, spec.inputs), return_type=DoubleType(),
                                batch_size=batch_size)
    return predict(*[F.col(c) for c in spec.inputs])


def encoded_udf(pre: dict[str, Any], load_uri: str, batch_size: int) -> Column:
    """The score job's UDF over inputs Spark encoded."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql.types import DoubleType

    from jobs.scoring.predictor import encoded_columns, make_encoded_predict_fn

    predict = predict_batch_udf(make_encoded_predict_fn(load_uri, len(pre["categorical"]), len(pre["numeric"])),
                                return_type=DoubleType(), batch_size=batch_size)
    return predict(*encoded_columns(pre))


def same_columns(job: DataFrame, other: DataFrame, name: str) -> None:
    """The benchmark's copies of the score job's output must write what the job writes."""
    if job.dtypes != other.dtypes:
        raise RuntimeError(f"{name} writes {other.dtypes}, the score job {job.dtypes}: "
                           "update benchmarks/scoring/spark.py")


def score_features_raw(
    features: DataFrame, spec: FeatureSpec, model: ModelRef, load_uri: str, batch_size: int, run_date: dt.date,
) -> DataFrame:
    """:func:`jobs.scoring.predictor.score_features` on raw columns (the pyfunc's own contract)."""
    return features.select(*prediction_columns(spec, model, raw_udf(spec, load_uri, batch_size), run_date))


def score_features_arrow(
    features: DataFrame, spec: FeatureSpec, pre: dict[str, Any], model: ModelRef, load_uri: str, batch_size: int,
    run_date: dt.date,
) -> DataFrame:
    """The score job's encoded inputs and predict function through ``mapInArrow``, without
    predict_batch_udf's pandas: each Arrow batch's columns go to the predict function as numpy arrays,
    in slices of ``batch_size``; the model is cached per Python worker as predict_batch_udf caches it."""
    import uuid

    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, StructField, StructType

    from jobs.scoring.predictor import encoded_columns, make_encoded_predict_fn

    ids = list(dict.fromkeys(spec.id_columns))
    inputs = [c.alias(f"_input{i}") for i, c in enumerate(encoded_columns(pre))]
    encoded = features.select(*ids, PARTITION, *inputs)
    kept = encoded.schema.fields[: len(ids) + 1]
    schema = StructType([*kept, StructField("probability", DoubleType())])
    make = make_encoded_predict_fn(load_uri, len(pre["categorical"]), len(pre["numeric"]))
    key, n_kept, names = uuid.uuid4(), len(kept), [*(f.name for f in kept), "probability"]

    def score(batches: Any) -> Any:
        import numpy as np
        import pyarrow as pa
        from pyspark.ml.model_cache import ModelCache

        predict = ModelCache.get(key)
        if predict is None:
            predict = make()
            ModelCache.add(key, predict)
        for batch in batches:
            arrays = [batch.column(i).to_numpy(zero_copy_only=False) for i in range(n_kept, batch.num_columns)]
            parts = [predict(*[a[i : i + batch_size] for a in arrays]) for i in range(0, batch.num_rows, batch_size)]
            probability = pa.array(np.concatenate(parts) if parts else np.zeros(0), pa.float64())
            yield pa.RecordBatch.from_arrays([*batch.columns[:n_kept], probability], names=names)

    return encoded.mapInArrow(score, schema).select(*prediction_columns(spec, model, F.col("probability"), run_date))


def mlflow_udf(spark: Any, load_uri: str) -> Any:
    """MLflow's own Spark scoring of the same model version: ``mlflow.pyfunc.spark_udf`` (the pyfunc
    on the raw feature columns, in this environment: ``env_manager="local"``)."""
    import mlflow.pyfunc

    return mlflow.pyfunc.spark_udf(spark, load_uri, result_type="double", env_manager="local")


def score_features_mlflow(features: DataFrame, spec: FeatureSpec, model: ModelRef, udf: Any,
                          run_date: dt.date) -> DataFrame:
    """The score job's output with the probability from :func:`mlflow_udf` over the model's inputs."""
    from pyspark.sql import functions as F

    return features.select(*prediction_columns(spec, model, udf(*[F.col(c) for c in spec.inputs]), run_date))


def read_write_only(features: DataFrame, spec: FeatureSpec, model: ModelRef, run_date: dt.date) -> DataFrame:
    """The score job's read and output without the model: a constant probability."""
    from pyspark.sql import functions as F

    return features.select(*prediction_columns(spec, model, F.lit(0.5), run_date))


def handoff_only(features: DataFrame, spec: FeatureSpec, model: ModelRef, run_date: dt.date) -> DataFrame:
    """The score job's read, hand-off of the model's inputs to the Python workers and back (Arrow,
    pandas) and output, without a model: a pandas UDF over the same columns returning a constant."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("double")  # type: ignore[call-overload]
    def constant(*columns):  # noqa: ANN002, ANN202 - varargs of pd.Series; hints would change the UDF type
        return pd.Series(0.5, index=columns[0].index)

    return features.select(*prediction_columns(spec, model, constant(*[F.col(c) for c in spec.inputs]), run_date))


def write_predictions(predictions: DataFrame, path: str) -> None:
    """The score job's write."""
    predictions.write.mode("overwrite").partitionBy(PARTITION).parquet(path)


def max_abs_difference(features: DataFrame, spec: FeatureSpec, pre: dict[str, Any], load_uri: str,
                       batch_size: int) -> tuple[float, int]:
    """(max |score job (encoded inputs) - raw columns|, rows) over the same rows, both UDFs in one select."""
    from pyspark.sql import functions as F

    both = features.select(encoded_udf(pre, load_uri, batch_size).alias("job"),
                           raw_udf(spec, load_uri, batch_size).alias("raw"))
    row = both.agg(F.max(F.abs(F.col("job") - F.col("raw"))).alias("diff"), F.count("*").alias("n")).first()
    return float(row["diff"] or 0.0), int(row["n"])


def check_columns(day: DataFrame, spec: FeatureSpec, pre: dict[str, Any], model: ModelRef, load_uri: str,
                  batch_size: int, run_date: dt.date) -> None:
    """Every Spark contender writes the score job's columns, checked on ``day`` before any timing."""
    from jobs.scoring.predictor import score_features

    job_output = score_features(day, spec, model, load_uri, batch_size, run_date, preprocessor=pre)
    same_columns(job_output, score_features_raw(day, spec, model, load_uri, batch_size, run_date), "raw columns")
    same_columns(job_output, score_features_arrow(day, spec, pre, model, load_uri, batch_size, run_date),
                 "mapInArrow")
    same_columns(job_output, read_write_only(day, spec, model, run_date), "read+write")
    same_columns(job_output, handoff_only(day, spec, model, run_date), "the no-op UDF")
