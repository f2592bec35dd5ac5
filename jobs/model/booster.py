"""An XGBoost booster as an MLflow pyfunc that needs no Spark to predict.

The sweep's ``xgboost`` family (:mod:`jobs.selection.trees`) fits ``xgboost.spark.SparkXGBClassifier``
on Spark; its plain ``xgboost.Booster`` (``model.get_booster()``) is logged here with the training's
:class:`jobs.model.tabular.Preprocessor`. The design matrix (:func:`design_matrix`; Spark's side:
:func:`jobs.selection.trees.design_column`) is each category column's index in the preprocessor's
vocabulary (0: unseen, rare or null), a categorical feature of XGBoost's own, then each number as it
is (XGBoost's trees do not need z-scores), null and NaN as missing. Same contract as the other
families (feature columns in, probability out), so the score job serves it through ``mlflow.pyfunc``
with raw inputs (it carries no ``preprocessor.json``, which is what would make the score job encode
the inputs for the MLP's net).
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

BOOSTER_FILE, INPUTS_FILE = "xgboost_booster.ubj", "xgboost_inputs.json"
# XGBoost reads its inputs as float32 and refuses infinities: a finite number beyond float32's range
# (1e300 in a column allowed to hold anything) would become one. Clipped here, and in Spark the same.
F32_LIMIT = 3.0e38


def feature_types(pre: Preprocessor) -> list[str]:
    """XGBoost's feature types of the design matrix: ``c`` per category column, ``q`` per number."""
    return ["c"] * len(pre.categorical) + ["q"] * len(pre.numeric)


def design_matrix(pre: Preprocessor, frame: pd.DataFrame) -> np.ndarray:
    """The rows of ``frame`` as XGBoost's input, float32: the category indices of
    :meth:`Preprocessor.encode`, then the numbers clipped to +-F32_LIMIT, missing as NaN."""
    import pandas as pd

    cats, _ = pre.encode(frame)
    out = np.empty((len(frame), len(pre.categorical) + len(pre.numeric)), dtype=np.float64)
    out[:, : len(pre.categorical)] = cats
    for j, col in enumerate(pre.numeric):
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        out[:, len(pre.categorical) + j] = np.clip(values, -F32_LIMIT, F32_LIMIT)  # NaN stays NaN
    return out.astype(np.float32)


def predict_booster(booster: Any, pre: Preprocessor, frame: pd.DataFrame) -> np.ndarray:
    """Positive-class probabilities of ``frame``'s rows, float64."""
    import xgboost

    matrix = xgboost.DMatrix(design_matrix(pre, frame), feature_types=feature_types(pre), enable_categorical=True,
                             missing=np.nan)
    return np.asarray(booster.predict(matrix), dtype=np.float64)


def save(booster: Any, pre: Preprocessor, params: dict[str, Any], folder: Path,
         calibration: dict[str, Any] | None = None) -> dict[str, str]:
    """Write the booster, its inputs' description and the calibration record when there is one
    (:mod:`jobs.model.calibration`); returns the pyfunc's artifacts map."""
    folder.mkdir(parents=True, exist_ok=True)
    booster.save_model(str(folder / BOOSTER_FILE))
    (folder / INPUTS_FILE).write_text(json.dumps({"preprocessor": pre.to_json(), "params": params}, sort_keys=True))
    artifacts = {name: str(folder / name) for name in (BOOSTER_FILE, INPUTS_FILE)}
    return {**artifacts, **(save_record(calibration, folder) if calibration is not None else {})}


def xgboost_requirement() -> str:
    """The pip requirement of the installed XGBoost: ``xgboost-cpu`` (no GPU code) or ``xgboost``."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("xgboost-cpu", "xgboost"):
        try:
            return f"{name}=={version(name)}"
        except PackageNotFoundError:
            continue
    raise RuntimeError("xgboost is not installed: pip install xgboost-cpu (or xgboost on a GPU machine)")


def log_pyfunc(booster: Any, pre: Preprocessor, params: dict[str, Any], example: pd.DataFrame,
               calibration: dict[str, Any] | None = None) -> Any:
    """Log the booster to the active MLflow run as a pyfunc with signature; MLflow's ModelInfo.
    ``calibration``: the record of :func:`jobs.model.calibration.calibrate` (None: none)."""
    import tempfile

    import pandas as pd
    from mlflow.models import infer_signature

    from jobs.model.tabular import package_model_code, signature_example

    example = signature_example(example, [*pre.categorical, *pre.numeric], pre.categorical)
    with tempfile.TemporaryDirectory() as tmp:
        return mlflow.pyfunc.log_model(
            name="model", python_model=BoosterClassifier(),
            artifacts=save(booster, pre, params, Path(tmp), calibration),
            signature=infer_signature(example, apply_scale(predict_booster(booster, pre, example),
                                                           (calibration or {}).get("logit_scale", 1.0))),
            input_example=example,
            code_paths=[package_model_code(Path(tmp))],
            pip_requirements=[xgboost_requirement(), f"mlflow=={mlflow.__version__}", f"pandas=={pd.__version__}",
                              f"numpy=={np.__version__}"],
        )


class BoosterClassifier(mlflow.pyfunc.PythonModel):
    """MLflow pyfunc: a DataFrame of feature columns in, the positive-class probability out."""

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        import xgboost

        from jobs.model.tabular import Preprocessor

        saved = json.loads(Path(context.artifacts[INPUTS_FILE]).read_text())
        self.pre = Preprocessor.from_json(saved["preprocessor"])
        self.booster = xgboost.Booster()
        self.booster.load_model(context.artifacts[BOOSTER_FILE])
        # one thread per Python worker, as the MLP's: Spark runs one worker per core when scoring
        self.booster.set_param({"nthread": 1, "device": "cpu"})
        self.logit_scale = read_scale(context.artifacts)  # 1.0 for a booster logged without calibration

    def predict(self, context: mlflow.pyfunc.PythonModelContext, model_input: pd.DataFrame,
                params: dict | None = None) -> np.ndarray:
        return apply_scale(predict_booster(self.booster, self.pre, model_input), self.logit_scale)
