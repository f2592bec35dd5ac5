"""Benchmark: rows/s of the Spark scoring job against a single-process pyarrow + torch baseline.

``python -m benchmarks.scoring --help`` lists its options.

Setup (timed, reported apart): the whole 2013 example year is landed into a throw-away lake, validated
(without GX) and turned into features (one Parquet file per day, as the features job writes them); a
small model (``train.model`` with the train section's hyperparameters and a preprocessor fitted on
January) is trained for a few hundred steps in this process, logged with ``log_pyfunc`` to a
throw-away MLflow store, registered and resolved with :func:`jobs.scoring.predictor.resolve_model`, as the score
job does. Scales are feature partitions of 1 day (2013-07-01), 1 month (July) and the full year, and
``Nx`` (e.g. ``10x``): N times the year, generated from the real rows
(:func:`benchmarks.scaling.resample_days`: each day's file holds its own rows, then N - 1 bootstrap
resamples of them with the continuous numeric inputs jittered by 5% of the day's standard deviation;
one file per date partition, the same schema), and ``Nx-day`` (e.g. ``3x-day``, about 1M rows): the
same N times the year's rows as one day's partition (one file, :func:`benchmarks.scaling.one_partition`),
the shape of the nightly job's input at lake scale: the score job scores one day per run, so the
year scales measure 365 files in and 365 partitions out, a shape it never runs.

Contenders, per scale, side by side in one local[2] session (one for all), each writing its own
throw-away predictions folder, partitioned by date:

- ``spark (score job)``: :func:`jobs.scoring.predictor.score_features` on the scale's partitions with the model's
  preprocessor, as the job runs it (Spark encodes the inputs: category codes and z-scores; the
  workers copy them into the model's input buffers and run the net), written as the score job
  writes (``.write.mode("overwrite").partitionBy("date").parquet``), with ``score.batch_size`` and
  Arrow's default ``maxRecordsPerBatch`` (10000);
- ``spark, raw columns to the pyfunc``: the same output with the raw feature columns handed to the
  pyfunc's ``predict`` (a pandas DataFrame of strings and numbers, encoded in the worker): the
  job's path for a model without a preprocessor; its probabilities are checked against the score
  job's on the same rows;
- ``spark, mlflow.pyfunc.spark_udf (raw columns)``: the same output with the probability from
  MLflow's own ``mlflow.pyfunc.spark_udf`` of the same model version (``env_manager="local"``) over
  the raw feature columns: what most users of Spark and MLflow reach for (the issue's target: the
  score job at least 1.5x faster); its sorted probabilities are checked against the score job's;
- ``spark mapInArrow, encoded inputs (experiment)``: the same encoding and predict function through
  ``mapInArrow`` instead of predict_batch_udf (numpy arrays straight from Arrow, no pandas at all);
- ``spark read+write``: the same read and write without the model (a constant probability): the floor
  of Spark's I/O;
- ``spark read+write + no-op pandas UDF``: the same, with the model's input columns handed to the
  Python workers and a constant handed back through a pandas UDF: the floor of any Python scoring
  in Spark (Arrow out of the JVM, pandas, Arrow back) before a model runs;
- ``baseline (pyarrow + torch)``: one process (this one, torch on one thread as the pyfunc sets it):
  a ``pyarrow.dataset`` scan of the same Parquet, the pyfunc's ``predict`` on raw columns in batches of
  ``score.batch_size`` (like the UDF), the same output columns, ``pyarrow.dataset.write_dataset``
  partitioned by date;
- ``baseline, torch direct``: the same, with the inputs encoded once with pyarrow compute and the net
  called directly on the tensors.

Stage time is the wall time of the action (Spark: the write; baseline: scan + predict + write) in a
warm process: Spark's session is started, its Python workers are running and hold the model (each
contender runs once as a warm-up, then ``--repeat`` times, the contenders taking turns; the best run
counts); file listing happens when a contender's DataFrame or dataset is built, outside the timing.
Python workers idle for a minute exit (Spark's fixed timeout), so a UDF contender is warmed up again,
untimed, when more than 45 s passed since the last UDF ran. Ratios are stage time / the baseline's.

Tuning (``--tune-scale``, default ``year``; ``none`` skips it): the three Spark contenders with a model over
``score.batch_size`` in (1024, 4096, 16384) x ``spark.sql.execution.arrow.maxRecordsPerBatch`` in
(10000, 50000). Each splits the Arrow batches, so a model call sees at most the smaller of the two.

Checks, per scale: every contender writes the score job's columns and rows; the raw-column UDF's
probabilities equal the score job's on the same rows (both UDFs in one select, max abs diff < 1e-6
expected), the others' sorted probabilities equal the score job's sorted ones.

Fixed costs, measured in fresh processes (``subprocess``) on the day's partition: Python start and
imports, ``SparkSession.builder.getOrCreate()``, the first Spark action (JVM warm-up), the first UDF
call (Python worker start and imports) and a new UDF on warm workers (model load), against a warm
call; for the baseline, Python start and imports, ``mlflow.pyfunc.load_model`` and the first call.

Prints the machine and Markdown tables and writes ``scoring.json`` (settings, setup times, every run,
the checks) to ``--out``. Needs about 3 x N x the year's features (12 MB) of free disk for ``Nx``.

The package: ``scales`` (what a scale scores, the bigger ones generated), ``model`` (the model
trained and registered), ``spark`` and ``baseline`` (the contenders' scoring), ``contenders`` (one
scale measured and checked, the tuning), ``probe`` (the fixed costs), ``report`` (the tables);
``__main__`` runs them.
"""

