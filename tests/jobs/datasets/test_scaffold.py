"""What a CSV sample shows: each column's type as Spark parses its text, and a key that tells the
sample's rows apart."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from jobs.datasets.sample import column_type, find_key, read_sample


def _csv(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("values", "expected"), [
    (["1", "-2", "+3"], "int"), (["9999999999", "1"], "bigint"), (["1", "2.5", "1e3", "NaN"], "double"),
    (["007", "12"], "string"), (["true", "False"], "boolean"), (["2013-01-01", "2013-1-2"], "date"),
    (["2013-01-01T06:00:00Z", "2013-01-02 07:30:00", "2013-01-03"], "timestamp"), (["2013-02-30"], "string"),
    (["a", "1"], "string"), ([], "string"), (["1", "yes"], "string"),
])
def test_a_column_gets_the_type_every_value_of_the_sample_parses_as(values, expected):
    assert column_type(pd.Series(values, dtype=object)) == expected


def test_a_key_is_the_fewest_columns_that_tell_the_rows_apart(tmp_path):
    rows = "\n".join(f"s{n},2015-06-0{1 + n % 2},{n}.5,{n % 4}" for n in range(30))
    sample = read_sample("readings", _csv(tmp_path, "readings", "serial,observed_on,temp,wind\n" + rows + "\n"))
    assert find_key(sample, "observed_on") == ["serial", "observed_on"] and find_key(sample) == ["serial"]
