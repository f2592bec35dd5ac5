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
