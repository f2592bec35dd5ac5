"""The Python side of Spark must match its JVM side (pyspark-client can overwrite pyspark's files)."""

from __future__ import annotations

import re
from pathlib import Path


def test_pyspark_python_matches_spark_jars():
    import pyspark

    jars = list((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert len(jars) == 1, jars
    jar_version = re.search(r"spark-core_[\d.]+-(.+)\.jar$", jars[0].name).group(1)
    assert pyspark.__version__ == jar_version


def test_running_session_reports_the_same_version(spark):
    import pyspark

    assert spark.version == pyspark.__version__
