"""Each rule is defined once and evaluated twice: the Spark predicate that splits the rows and the
GX expectation in the report must count the same rows."""

from __future__ import annotations

import pytest

from jobs.validation.rows import run_expectations
from jobs.validation.rules import Between, Condition, InSet, Matches, NotNull, TableSuite, Unique

ROWS = [
    # code, n,    x,    a,   b
    ("AA", 1, 5.0, 1, 2),
    ("AA", 1, -1.0, 1, 1),  # repeated key (code, n); x below 0; a == b
    ("B6", 2, None, None, 3),  # nulls pass value rules, fail NotNull
    ("zz", 3, 10.0, 2, 2),  # unknown and malformed code; x at the strict max; a == b
    (None, 4, 0.0, 5, 1),  # null code; x at the (non-strict) min
]
SCHEMA = "code string, n int, x double, a int, b int"
REFS = {"codes.code": ["AA", "B6", "O'K"]}
RULES = [
    NotNull(name="code_present", description="", column="code"),
    NotNull(name="x_present", description="", column="x"),
    Between(name="x_range", description="", column="x", min_value=0, max_value=10, strict_max=True),
    InSet(name="code_known", description="", column="code", reference="codes.code"),
    InSet(name="n_small", description="", column="n", values=(1, 2, 3)),
    Matches(name="code_format", description="", column="code", regex=r"^[A-Z0-9]{2}$"),
    Unique(name="key_unique", description="", key=("code", "n")),
    Unique(name="n_unique", description="", key=("n",)),
    Condition(name="a_below_b", description="a is below b", sql="a < b", uses=("a", "b")),
]
EXPECTED = {
    "code_present": 1, "x_present": 1, "x_range": 2, "code_known": 1, "n_small": 1, "code_format": 1,
    "key_unique": 2, "n_unique": 2, "a_below_b": 3,
}


@pytest.fixture(scope="module")
def frame(spark):
    return spark.createDataFrame(ROWS, SCHEMA).cache()


def test_spark_predicates_flag_the_expected_rows(frame):
    from pyspark.sql import functions as F

    flags = frame.select(*[r.violation(REFS).cast("int").alias(r.name) for r in RULES])
    counts = flags.select(*[F.sum(r.name).alias(r.name) for r in RULES]).first()
    assert counts.asDict() == EXPECTED


def test_great_expectations_counts_the_same_rows(frame, capfd):
    capfd.readouterr()
    gx = run_expectations(frame, "rules_test", RULES, REFS)
    assert {name: result["error"] for name, result in gx.items()} == dict.fromkeys(EXPECTED)
    assert {name: result["unexpected"] for name, result in gx.items()} == EXPECTED
    # GX's tqdm bars would garble a task log and the replay's console
    assert "Calculating Metrics" not in capfd.readouterr().err


def test_rule_names_are_unique_within_a_table():
    with pytest.raises(ValueError, match="x_present"):
        TableSuite(rules=[RULES[1], RULES[1]])


@pytest.mark.parametrize("pandas_max_rows", [0, 100], ids=["gx_on_spark", "gx_on_pandas"])
def test_a_nan_breaks_a_range_for_the_split_and_for_great_expectations_alike(spark, pandas_max_rows):
    """Spark orders NaN above every number (the split, and GX on Spark, compare it as +infinity);
    GX on pandas, which cannot tell NaN from null, skipped it as missing. Both count it alike."""
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(1.0,), (float("nan"),), (None,), (-2.0,), (float("inf"),)], "y double")
    rules = [Between(name="y_positive", description="", column="y", min_value=0, strict_min=True),
             Between(name="y_small", description="", column="y", max_value=10),
             Between(name="y_range", description="", column="y", min_value=0, max_value=10)]
    split = frame.select(*[F.sum(r.violation({}).cast("int")).alias(r.name) for r in rules]).first().asDict()
    assert split == {"y_positive": 1, "y_small": 2, "y_range": 3}  # -2 below 0; NaN and inf above 10
    gx = run_expectations(frame, "nan_test", rules, {}, rows=5, pandas_max_rows=pandas_max_rows)
    assert {name: result["unexpected"] for name, result in gx.items()} == split
