"""A blend of finished models as one MLflow pyfunc: the mean of their probabilities.

Each member is a logged pyfunc with the pipeline's contract (feature columns in, the positive-class
probability out: the MLP, an XGBoost booster, an MLlib baseline). The blend copies every member's
model folder into its own (:func:`log_pyfunc`), so it loads and predicts without the members' runs,
without Spark and without the tracking server, and serves through ``mlflow.pyfunc`` like any model.
Members keep their own calibration; the mean of calibrated probabilities is the blend's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc
import numpy as np

if TYPE_CHECKING:
    import pandas as pd

MEMBERS_FILE = "blend.json"  # the members' names, in order, and where each came from


def member_requirements(folders: list[Path]) -> list[str]:
    """The pip requirements of every member (their ``requirements.txt``), each once, in order."""
    found: list[str] = []
    for folder in folders:
        path = folder / "requirements.txt"
        lines = path.read_text().splitlines() if path.exists() else []
        found += [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return list(dict.fromkeys(found))


def log_pyfunc(members: dict[str, str], example: pd.DataFrame) -> Any:
    """Log the blend of ``members`` (a name -> the member's model URI) to the active run as a
    pyfunc with signature; MLflow's ModelInfo."""
    import tempfile

    import mlflow.artifacts
    from mlflow.models import infer_signature

    from jobs.model.tabular import package_model_code

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        artifacts = {name: mlflow.artifacts.download_artifacts(uri, dst_path=str(folder / name))
                     for name, uri in members.items()}
        (folder / MEMBERS_FILE).write_text(json.dumps({"members": list(members), "sources": members}, indent=1))
        artifacts[MEMBERS_FILE] = str(folder / MEMBERS_FILE)
        probabilities = predict_members([mlflow.pyfunc.load_model(artifacts[name]) for name in members], example)
        return mlflow.pyfunc.log_model(
            name="model", python_model=BlendClassifier(), artifacts=artifacts,
            signature=infer_signature(example, probabilities), input_example=example,
            code_paths=[package_model_code(folder)],
            pip_requirements=member_requirements([Path(artifacts[name]) for name in members]),
        )


def predict_members(models: list[Any], frame: pd.DataFrame) -> np.ndarray:
    """The mean of the members' probabilities of ``frame``'s rows."""
    return np.mean([np.asarray(model.predict(frame), dtype=np.float64).reshape(-1) for model in models], axis=0)


class BlendClassifier(mlflow.pyfunc.PythonModel):
    """MLflow pyfunc: a DataFrame of feature columns in, the mean of the members' probabilities out."""

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        names = json.loads(Path(context.artifacts[MEMBERS_FILE]).read_text())["members"]
        self.names = names
        self.members = [mlflow.pyfunc.load_model(context.artifacts[name]) for name in names]

    def predict(self, context: mlflow.pyfunc.PythonModelContext, model_input: pd.DataFrame,
                params: dict | None = None) -> np.ndarray:
        return predict_members(self.members, model_input)
