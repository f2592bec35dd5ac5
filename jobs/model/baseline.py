"""The MLlib baselines as MLflow pyfuncs that need no Spark to predict.

A fitted pyspark.ml model is exported to plain numbers (:func:`export`): a logistic regression's
coefficients and intercept, a gradient-boosted ensemble's trees as flat arrays. The pyfunc
(:class:`BaselineClassifier`) keeps the training's :class:`jobs.model.tabular.Preprocessor`, builds the same
design matrix Spark trained on (:func:`design_matrix`; Spark's side:
:func:`jobs.selection.baseline_training.design_column`) and returns the positive-class probability:
the same contract as the PyTorch model (feature columns in, probability out), so scoring serves
either through ``mlflow.pyfunc`` unchanged.

The design depends on the kind (:data:`DESIGNS`): logistic regression gets one column per category
value (``onehot``), the trees each category's vocabulary index as one number (``codes``): a tree
splits an index as well as a one-hot block, on a third of the columns, so it fits in about half the
time (docs/training.md). A GBT logged before the design was recorded was one-hot: its artifact has
no ``design`` and reads as ``onehot``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc
import numpy as np

from jobs.model.calibration import apply_scale, read_scale, save_record

if TYPE_CHECKING:
    import pandas as pd

    from jobs.model.tabular import Preprocessor

ARTIFACT = "baseline.json"  # not the torch model's preprocessor.json: scoring passes raw columns


ONEHOT, CODES = "onehot", "codes"
DESIGNS = {"logistic_regression": ONEHOT, "gbt": CODES}  # a baseline kind's design matrix


def design_width(pre: Preprocessor, design: str = ONEHOT) -> int:
    """Columns of the design matrix: a one-hot block per category column (the unknown index
    included), or one index column per category column with ``codes``; then one column per
    standardised number."""
    return (sum(pre.cardinalities) if design == ONEHOT else len(pre.categorical)) + len(pre.numeric)


def design_matrix(pre: Preprocessor, frame: pd.DataFrame, design: str = ONEHOT) -> np.ndarray:
    """The design matrix of ``frame``'s rows, float64: what
    :func:`jobs.selection.baseline_training.design_column` gives in Spark."""
    cats, nums = pre.encode(frame)
    if design == CODES:
        return np.concatenate([cats.astype(np.float64), nums.astype(np.float64)], axis=1)
    out = np.zeros((len(frame), design_width(pre)), dtype=np.float64)
    offset = 0
    for j, size in enumerate(pre.cardinalities):
        out[np.arange(len(frame)), offset + cats[:, j]] = 1.0
        offset += size
    out[:, offset:] = nums.astype(np.float64)
    return out


def export(model: Any, kind: str) -> dict[str, Any]:
    """A fitted pyspark.ml classifier as plain numbers :func:`predict_design` evaluates."""
    if kind == "logistic_regression":
        return {"coefficients": model.coefficients.toArray().tolist(), "intercept": float(model.intercept)}
    trees = [_flat_tree(tree._java_obj.rootNode()) for tree in model.trees]
    return {"trees": trees, "weights": [float(w) for w in model.treeWeights]}


def _flat_tree(root: Any) -> dict[str, list[float]]:
    """A Spark tree (through py4j) as arrays: feature (-1 at a leaf), threshold, children, value."""
    tree: dict[str, list[Any]] = {"feature": [], "threshold": [], "left": [], "right": [], "value": []}
    stack = [(root, None, "")]
    while stack:
        node, parent, side = stack.pop()
        index = len(tree["feature"])
        if parent is not None:
            tree[side][parent] = index
        leaf = node.getClass().getSimpleName() == "LeafNode"
        split = None if leaf else node.split()
        tree["feature"].append(-1 if leaf else int(split.featureIndex()))
        tree["threshold"].append(0.0 if leaf else float(split.threshold()))  # continuous splits only
        tree["left"].append(-1)
        tree["right"].append(-1)
        tree["value"].append(float(node.prediction()))
        if not leaf:
            stack += [(node.rightChild(), index, "right"), (node.leftChild(), index, "left")]
    return tree


def predict_design(kind: str, params: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """Positive-class probabilities of design-matrix rows, as Spark's model computes them."""
    if kind == "logistic_regression":
        margin = x @ np.asarray(params["coefficients"]) + params["intercept"]
        return 1.0 / (1.0 + np.exp(-margin))
    margin = np.zeros(len(x))
    rows = np.arange(len(x))
    for tree, weight in zip(params["trees"], params["weights"], strict=True):
        feature, threshold = np.asarray(tree["feature"]), np.asarray(tree["threshold"])
        left, right, value = np.asarray(tree["left"]), np.asarray(tree["right"]), np.asarray(tree["value"])
        node = np.zeros(len(x), dtype=np.int64)
        while (inner := feature[node] >= 0).any():  # Spark goes left when value <= threshold
            goes_left = x[rows, np.maximum(feature[node], 0)] <= threshold[node]
            node = np.where(inner, np.where(goes_left, left[node], right[node]), node)
        margin += weight * value[node]
    return 1.0 / (1.0 + np.exp(-2.0 * margin))  # Spark's GBT: log loss on labels in {-1, 1}


def save(pre: Preprocessor, kind: str, params: dict[str, Any], folder: Path,
         calibration: dict[str, Any] | None = None) -> dict[str, str]:
    """Write the pyfunc's artifact, and the calibration record when there is one
    (:mod:`jobs.model.calibration`); returns the artifacts map."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ARTIFACT).write_text(json.dumps({"kind": kind, "design": DESIGNS[kind], "preprocessor": pre.to_json(),
                                               "params": params}))
    return {ARTIFACT: str(folder / ARTIFACT), **(save_record(calibration, folder) if calibration is not None else {})}


class BaselineClassifier(mlflow.pyfunc.PythonModel):
    """MLflow pyfunc: a DataFrame of feature columns in, the positive-class probability out."""

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        from jobs.model.tabular import Preprocessor

        saved = json.loads(Path(context.artifacts[ARTIFACT]).read_text())
        self.kind, self.params, self.design = saved["kind"], saved["params"], saved.get("design", ONEHOT)
        self.pre = Preprocessor.from_json(saved["preprocessor"])
        self.logit_scale = read_scale(context.artifacts)  # 1.0 for a baseline logged without calibration

    def predict(self, context: mlflow.pyfunc.PythonModelContext, model_input: pd.DataFrame,
                params: dict | None = None) -> np.ndarray:
        return apply_scale(predict_design(self.kind, self.params, design_matrix(self.pre, model_input, self.design)),
                           self.logit_scale)
