"""A class-data-sharing archive of Spark's JVM classes, so a spark-submit starts on less CPU.

Every task of the DAGs is a spark-submit, and each one starts a JVM that loads and verifies some
fifteen thousand classes of Spark's jars before the job's first line runs: on a small machine
that is most of a short job's CPU. Java 17's dynamic class-data sharing (JEP 350) keeps those
classes, already parsed and verified, in a file the JVM maps at start. ``make class-archive``
(which ``make test`` and ``make airflow`` run) builds one for this environment's pyspark::

    python -m jobs.runtime.class_archive [--out PATH]

which runs a small workload that uses the classes the jobs use (CSV and Parquet, window
functions, Arrow and pandas UDFs, MLlib, a barrier stage) under spark-submit with
``-XX:ArchiveClassesAtExit``, then moves the archive into place (``.venv/spark-classes.jsa``).
``scripts/env.sh`` then sets ``SPARK_SUBMIT_OPTS=-XX:SharedArchiveFile=...`` where the archive
exists (a value already set is kept), and every spark-submit of that environment, the tasks',
the tests' sessions and the Spark Connect server, starts from it.

Nothing depends on it: a JVM whose class path or Java build no longer matches the archive (pyspark
reinstalled, Java upgraded) prints one ``Unable to use shared archive`` warning and loads its
classes as before; build it again then. The archive is tied to the exact jars, so it is built on
the machine that runs the spark-submits, never copied between machines.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARCHIVE_NAME = "spark-classes.jsa"


def default_path() -> Path:
    """The archive of this Python environment (its pyspark's jars): ``<sys.prefix>/spark-classes.jsa``."""
    return Path(sys.prefix) / ARCHIVE_NAME


def build(out: Path, timeout: float = 600.0) -> Path:
    """Run the workload under spark-submit with ``-XX:ArchiveClassesAtExit`` and move the archive
    to ``out`` (atomically: a failed build leaves any earlier archive in place)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="class-archive-") as folder:
        partial = Path(folder) / ARCHIVE_NAME
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial}",
               "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
        command = ["spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                   "--conf", "spark.ui.showConsoleProgress=false", __file__, "--workload", folder]
        started = time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or not partial.exists():
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
            raise RuntimeError(f"building the class archive failed (exit {done.returncode}):\n{tail}")
        staged = out.with_name(out.name + ".partial")  # then one rename on out's own file system
        shutil.copyfile(partial, staged)
        os.replace(staged, out)
    print(f"class archive: {out} ({out.stat().st_size / 2**20:.0f} MiB, {time.monotonic() - started:.0f} s)")
    return out


def workload(folder: str) -> None:
    """Touch the Spark code paths the jobs take, so their classes go into the archive."""
    import pandas as pd
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 - pyspark's own idiom

    from jobs.runtime.session import get_spark

    spark = get_spark("class archive")  # the jobs' own session settings
    rows = pd.DataFrame({"day": ["2013-01-01", "2013-01-02"] * 50, "origin": ["EWR", "JFK", "LGA", "JFK"] * 25,
                         "delay": [float(i % 7) for i in range(100)], "label": [i % 2 for i in range(100)]})
    csv = f"{folder}/raw.csv"
    rows.to_csv(csv, index=False)
    raw = spark.read.csv(csv, header=True, schema="day string, origin string, delay double, label int",
                         mode="PERMISSIVE")
    frame = (raw.withColumn("day", F.to_date("day"))
             .withColumn("rank", F.row_number().over(Window.partitionBy("origin").orderBy("delay")))
             .withColumn("mean", F.avg("delay").over(Window.partitionBy("origin", "day"))))
    frame.write.mode("overwrite").partitionBy("day").parquet(f"{folder}/lake")
    back = spark.read.parquet(f"{folder}/lake")
    joined = back.join(back.groupBy("origin").agg(F.count("*").alias("n")), "origin", "left")

    def doubled(values):  # noqa: ANN001, ANN202 - typed below: the hints must be objects, not strings
        return values * 2

    doubled.__annotations__ = {"values": pd.Series, "return": pd.Series}
    scored = joined.withColumn("twice", F.pandas_udf(doubled, "double")("delay"))
    scored.mapInPandas(lambda batches: (b[["origin"]] for b in batches), "origin string").count()
    scored.toPandas()
    spark.createDataFrame(rows).write.mode("overwrite").json(f"{folder}/json")
    features = VectorAssembler(inputCols=["delay", "mean"], outputCol="features").transform(back)
    LogisticRegression(maxIter=2).fit(features).transform(features).select("probability").collect()
    spark.sparkContext.parallelize(range(2), 2).barrier().mapPartitions(lambda part: part).collect()
    spark.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", type=Path, default=default_path(), help="where the archive goes")
    parser.add_argument("--workload", help=argparse.SUPPRESS)  # the run under spark-submit
    args = parser.parse_args(argv)
    if args.workload:
        workload(args.workload)
        return
    build(args.out)


if __name__ == "__main__":
    main()
