"""The baselines' pyfunc without Spark: each kind's design matrix, and artifacts logged before the
design was recorded."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd

from jobs.model.tabular import Preprocessor

PRE = Preprocessor(categorical=["carrier", "origin"], numeric=["distance", "dep_hour"],
                   vocab={"carrier": ["AA", "B6", "UA"], "origin": ["EWR", "JFK"]},
                   mean={"distance": 1000.0, "dep_hour": 13.0}, std={"distance": 600.0, "dep_hour": 5.0})
FRAME = pd.DataFrame({"carrier": ["AA", "UA", "ZZ", "B6"], "origin": ["JFK", "EWR", "JFK", None],
                      "distance": [200.0, 2500.0, 1000.0, np.nan], "dep_hour": [6.0, 21.0, 13.0, 9.0]})
# one stump on column 0 at 0.5: in the codes design the carrier's index (AA 1, B6 2, UA 3, unknown 0), in
# the one-hot design the carrier's unknown indicator
STUMP = {"trees": [{"feature": [0, -1, -1], "threshold": [0.5, 0.0, 0.0], "left": [1, -1, -1],
                    "right": [2, -1, -1], "value": [0.0, -0.5, 0.5]}], "weights": [1.0]}


def _loaded(artifact: dict, tmp_path) -> object:
    from jobs.model.baseline import ARTIFACT, BaselineClassifier

    path = tmp_path / ARTIFACT
    path.write_text(json.dumps(artifact))
    model = BaselineClassifier()
    model.load_context(SimpleNamespace(artifacts={ARTIFACT: str(path)}))
    return model


def test_each_kind_has_its_design_and_the_trees_see_one_index_per_category():
    from jobs.model.baseline import CODES, DESIGNS, ONEHOT, design_matrix, design_width

    assert DESIGNS == {"logistic_regression": ONEHOT, "gbt": CODES}
    onehot, codes = design_matrix(PRE, FRAME, ONEHOT), design_matrix(PRE, FRAME, CODES)
    assert onehot.shape == (4, design_width(PRE, ONEHOT)) == (4, 4 + 3 + 2)
    assert codes.shape == (4, design_width(PRE, CODES)) == (4, 2 + 2)
    np.testing.assert_array_equal(codes[:, :2], [[1, 2], [3, 1], [0, 2], [2, 0]])  # unseen and null: 0
    np.testing.assert_array_equal(codes[:, 2:], onehot[:, 7:])  # the same standardised numbers
    # each one-hot block has its 1 at the index the codes give
    np.testing.assert_array_equal(onehot[:, :4].argmax(axis=1), codes[:, 0])
    np.testing.assert_array_equal(onehot[:, 4:7].argmax(axis=1), codes[:, 1])


def test_a_gbt_is_saved_with_its_design_and_one_saved_before_reads_one_hot(tmp_path):
    from jobs.model.baseline import ARTIFACT, CODES, ONEHOT, design_matrix, predict_design, save

    save(PRE, "gbt", STUMP, tmp_path / "now")
    saved = json.loads((tmp_path / "now" / ARTIFACT).read_text())
    assert saved["design"] == CODES
    now = _loaded(saved, tmp_path)
    np.testing.assert_allclose(now.predict(None, FRAME), predict_design("gbt", STUMP, design_matrix(PRE, FRAME, CODES)))
    # the carrier's index: the unknown one (0) left, every known carrier right
    np.testing.assert_allclose(now.predict(None, FRAME), 1 / (1 + np.exp(-2 * np.array([0.5, 0.5, -0.5, 0.5]))))
    before = _loaded({k: v for k, v in saved.items() if k != "design"}, tmp_path)
    np.testing.assert_allclose(before.predict(None, FRAME),
                               predict_design("gbt", STUMP, design_matrix(PRE, FRAME, ONEHOT)))
    # one-hot column 0 is the unknown carrier's indicator: only the third row goes right
    np.testing.assert_allclose(before.predict(None, FRAME), 1 / (1 + np.exp(-2 * np.array([-0.5, -0.5, 0.5, -0.5]))))
