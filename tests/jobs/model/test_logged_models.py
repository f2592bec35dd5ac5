"""A logged model carries only what it needs to load: ``jobs/__init__.py`` and ``jobs/model/``
(:func:`jobs.model.tabular.package_model_code`). Registered versions of the PyTorch model and of an
MLlib baseline load with MLflow alone in a fresh process that cannot import the pipeline's
``jobs`` (no editable-install finder, no path entry holding it, another working folder) and give
the probabilities they gave here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.model.tabular import Preprocessor

REPO = Path(__file__).resolve().parents[3]
PRE = Preprocessor(categorical=["carrier", "origin"], numeric=["distance", "dep_hour"],
                   vocab={"carrier": ["AA", "B6", "UA"], "origin": ["EWR", "JFK"]},
                   mean={"distance": 1000.0, "dep_hour": 13.0}, std={"distance": 600.0, "dep_hour": 5.0})
FRAME = pd.DataFrame({"carrier": ["UA", "AA", "ZZ", None, "B6", "UA"],
                      "origin": ["EWR", "JFK", "LGA", "EWR", None, "JFK"],
                      "distance": [1400.0, 200.0, np.nan, 2500.0, 760.0, 1089.0],
                      "dep_hour": [5.0, 23.0, 12.0, np.nan, 17.0, 9.0]})

# What the fresh process runs: the pipeline's jobs made unreachable first (the editable install's
# finder on sys.meta_path and its path hook removed, every sys.path entry holding a jobs/ folder
# dropped), then each registered version loaded with MLflow and asked for probabilities.
CHILD = textwrap.dedent("""
    import importlib.util, json, os, sys

    def editable(hook):
        return (getattr(hook, "__module__", None) or type(hook).__module__ or "").startswith("__editable__")

    sys.meta_path[:] = [finder for finder in sys.meta_path if not editable(finder)]
    sys.path_hooks[:] = [hook for hook in sys.path_hooks if not editable(hook)]
    sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or os.getcwd(), "jobs"))]
    sys.path_importer_cache.clear()
    if "jobs" in sys.modules or importlib.util.find_spec("jobs") is not None:
        sys.exit("the pipeline's jobs package is still importable: the check would prove nothing")

    import mlflow.pyfunc
    import pandas as pd

    frame = pd.read_parquet(sys.argv[1])
    out = {"probabilities": {}}
    for name, uri in json.loads(sys.argv[2]).items():
        out["probabilities"][name] = [float(p) for p in mlflow.pyfunc.load_model(uri).predict(frame)]
    out["jobs_file"] = sys.modules["jobs"].__file__
    out["jobs_modules"] = sorted(m for m in sys.modules if m == "jobs" or m.startswith("jobs."))
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """The PyTorch model (log_pyfunc) and a logistic-regression baseline (the baselines job's
    log_model) logged and registered in the test session's store (scripts/env.sh, under the test
    home: migrated once for every test using it); their probabilities in this process."""
    import mlflow
    import torch

    from jobs.model.baseline import design_width
    from jobs.model.tabular import build_net, log_pyfunc, predict_proba
    from jobs.selection.baseline_training import log_model
    from jobs.tracking import ensure_experiment

    home = tmp_path_factory.mktemp("logged-models")
    uri = os.environ["MLFLOW_TRACKING_URI"]
    mlflow.set_tracking_uri(uri)  # another module may have pointed this process elsewhere
    experiment = ensure_experiment("logged-models")
    torch.manual_seed(3)
    hyper = {"embedding_dim": 3, "hidden_units": [8]}
    net = build_net(PRE, hyper)
    params = {"coefficients": np.linspace(-1.0, 1.0, design_width(PRE)).tolist(), "intercept": -0.3}
    with mlflow.start_run(experiment_id=experiment):
        torch_info = log_pyfunc(net, PRE, hyper, FRAME)
    with mlflow.start_run(experiment_id=experiment):
        baseline_info = log_model(PRE, "logistic_regression", params, FRAME)
    versions = {name: f"models:/{name}/{mlflow.register_model(info.model_uri, name).version}"
                for name, info in (("logged_torch", torch_info), ("logged_baseline", baseline_info))}
    here = {name: np.asarray(mlflow.pyfunc.load_model(v).predict(FRAME), dtype=float).ravel()
            for name, v in versions.items()}
    code = {name: Path(mlflow.artifacts.download_artifacts(f"{v}/code", dst_path=str(home / name)))
            for name, v in versions.items()}
    return {"uri": uri, "home": home, "versions": versions, "here": here, "code": code,
           "torch": predict_proba(net, PRE, FRAME)}


def shipped_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


EXPECTED = {"jobs/__init__.py", *(f"jobs/model/{p.name}" for p in (REPO / "jobs/model").glob("*.py"))}


def test_the_model_code_is_only_jobs_init_and_jobs_model(tmp_path):
    from jobs.model.tabular import code_paths, package_model_code

    assert shipped_files(Path(package_model_code(tmp_path / "a")).parent) == EXPECTED
    assert code_paths("jobs.model.tabular:build_net", tmp_path / "b") == [str(tmp_path / "b/code/jobs")]


@pytest.mark.e2e  # a fresh interpreter importing MLflow and torch: about 15 s
def test_registered_versions_load_in_a_fresh_process_without_the_pipeline(registered):
    home = registered["home"]
    inputs = home / "rows.parquet"
    FRAME.to_parquet(inputs)
    elsewhere = home / "elsewhere"  # not the repo: its jobs/ is not the working folder's
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MLFLOW_TRACKING_URI"] = registered["uri"]
    done = subprocess.run([sys.executable, "-c", CHILD, str(inputs), json.dumps(registered["versions"])],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for name, folder in registered["code"].items():  # what the registered versions carry
        assert shipped_files(folder) == EXPECTED, f"{name} ships more than jobs/__init__.py + jobs/model/"
    assert not Path(found["jobs_file"]).resolve().is_relative_to(REPO), found["jobs_file"]  # the model's own copy
    assert set(found["jobs_modules"]) <= {"jobs", "jobs.model", "jobs.model.tabular", "jobs.model.baseline",
                                      "jobs.model.calibration"}
    for name, probabilities in found["probabilities"].items():
        np.testing.assert_allclose(probabilities, registered["here"][name], rtol=0, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(found["probabilities"]["logged_torch"], registered["torch"], rtol=0, atol=1e-12)
    assert set(found["probabilities"]) == {"logged_torch", "logged_baseline"}
