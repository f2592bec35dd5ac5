"""The model and everything it needs to turn feature rows into probabilities.

- :class:`Preprocessor`: category vocabularies and normalisation statistics fitted on the
  training window; saved with the model so scoring cannot drift from training.
- :class:`TabularNet`: embeddings for categorical columns, an MLP over them and the standardised
  numeric columns, one logit out; dropout on the embeddings and after each hidden layer.
  :class:`TabularEnsemble`: several of them trained side by side, their mean probability out.
- :class:`TabularClassifier`: the MLflow pyfunc that bundles both; ``predict`` takes a pandas
  DataFrame of raw feature columns and returns the probability of the positive class. Defined on
  first use (:func:`__getattr__`): its base class is MLflow's, and a training rank, which encodes
  and trains with this module, imports no MLflow (only rank 0 logs).

Swap in another architecture with ``train.model`` (``module:function`` called with the preprocessor
and ``train.hyperparameters``, returning a torch module as :func:`build_model` describes); the
pyfunc contract (feature columns in, probability out) stays the same.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from jobs.model.calibration import apply_scale, read_scale, save_record

DEFAULT_MODEL = f"{__name__}:build_net"  # train.model when the config names none (jobs.config)
UNKNOWN_INDEX = 0  # categories not seen in training (and nulls) share index 0
# A z-score beyond this many standard deviations is clipped to it: a huge finite number in a column
# allowed to hold anything (1e300) would otherwise overflow the model's float32 input to infinity.
Z_LIMIT = 1e4


@dataclass(frozen=True)
class Preprocessor:
    """Encodes feature columns: categories to indices, numbers to z-scores with nulls at the mean,
    a number outside the training window's range (``low``..``high``, where recorded) at the nearest
    end of it: no family extrapolates a trend of its window (a count of history days that only grew
    in January reads 28 in February, three deviations above anything trained on)."""

    categorical: list[str]
    numeric: list[str]
    vocab: dict[str, list[str]]
    mean: dict[str, float]
    std: dict[str, float]
    # the range of each number in the training window (a model logged before had none: not clipped)
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)

    @property
    def cardinalities(self) -> list[int]:
        """Embedding table sizes: the vocabulary plus the unknown index."""
        return [len(self.vocab[c]) + 1 for c in self.categorical]

    def encode(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Return (category indices [n, k] int64, standardised numbers [n, m] float32): nulls, NaN and
        infinities at 0, finite z-scores clipped to the training range's (:meth:`z_range`), then to
        +-Z_LIMIT."""
        n = len(frame)
        cats = np.zeros((n, len(self.categorical)), dtype=np.int64)
        for j, col in enumerate(self.categorical):
            # A lookup, not pd.Categorical(values, categories=...): pandas 3 deprecates values outside
            # the categories there (pandas 4 raises), and an unseen value is what scoring meets.
            codes = pd.Index(self.vocab[col], dtype="string").get_indexer(frame[col].astype("string"))
            cats[:, j] = codes.astype(np.int64) + 1  # -1 (unseen or null) becomes UNKNOWN_INDEX
        nums = np.zeros((n, len(self.numeric)), dtype=np.float32)
        for j, col in enumerate(self.numeric):
            values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            z = (values - self.mean[col]) / self.std[col]
            low, high = self.z_range(col)
            z = np.where(np.isfinite(z), np.clip(z, low, high), 0.0)
            nums[:, j] = np.clip(z, -Z_LIMIT, Z_LIMIT)
        return cats, nums

    def z_range(self, col: str) -> tuple[float, float]:
        """The z-scores of ``col``'s training range, (-inf, inf) where none was recorded."""
        low, high = self.low.get(col), self.high.get(col)
        return ((-math.inf if low is None else (low - self.mean[col]) / self.std[col]),
                (math.inf if high is None else (high - self.mean[col]) / self.std[col]))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Preprocessor:
        return cls(**json.loads(text))


def safe_std(value: float | None) -> float:
    """A usable divisor: constant or empty columns get 1 instead of 0 or NaN."""
    if value is None or not math.isfinite(value) or value < 1e-12:
        return 1.0
    return float(value)


class TabularNet(nn.Module):
    """Embeddings and numbers into an MLP, one logit out. ``dropout`` (training only) zeroes that
    share of the embedded values and of each hidden layer's outputs: with a window's few tens of
    thousands of rows and the hourly weather, an unregularised net learns the training days
    themselves and ranks a new day's flights worse than logistic regression (docs/training.md).

    ``wide`` (wide and deep) adds a linear term beside the MLP's, so the net holds logistic
    regression's model as one of its own and the hidden layers add what it lacks: ``True``, linear
    in the MLP's inputs (the embedded categories, after dropout, and the numbers); ``"onehot"``, a
    weight per category and per number outside dropout (:class:`OneHotLinear`), the design MLlib's
    logistic regression fits."""

    def __init__(
        self, cardinalities: list[int], n_numeric: int, embedding_dim: int, hidden_units: list[int],
        dropout: float = 0.0, wide: bool | str = False,
    ) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(size, embedding_dim) for size in cardinalities)
        self.embedding_dropout = nn.Dropout(dropout)  # no weights: a net saved without dropout loads as is
        layers: list[nn.Module] = []
        width = embedding_dim * len(cardinalities) + n_numeric
        self.wide = nn.Linear(width, 1) if wide is True else None
        self.onehot = OneHotLinear(1, cardinalities, n_numeric) if wide == "onehot" else None
        for units in hidden_units:
            layers += [nn.Linear(width, units), nn.ReLU(), *([nn.Dropout(dropout)] if dropout else [])]
            width = units
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, cats: torch.Tensor, nums: torch.Tensor) -> torch.Tensor:
        embedded = self.embedding_dropout(torch.cat([emb(cats[:, j]) for j, emb in enumerate(self.embeddings)], dim=1))
        inputs = torch.cat([embedded, nums], dim=1)
        out = self.mlp(inputs) if self.wide is None else self.mlp(inputs) + self.wide(inputs)
        out = out.squeeze(1)
        return out if self.onehot is None else out + self.onehot(cats, nums)[0]


class StackedLinear(nn.Module):
    """``members`` linear layers of the same shape applied at once: [members, n, in] -> [members, n, out],
    each member's own weights (initialised as :class:`torch.nn.Linear` initialises one)."""

    def __init__(self, members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class OneHotLinear(nn.Module):
    """Logistic regression's linear term, ``members`` times: a weight per category of each categorical
    column (an embedding of width 1 per member, the unknown index's included) and per number, and a
    bias; [members, n] out. The term a one-hot design gives, without building the one-hot columns."""

    def __init__(self, members: int, cardinalities: list[int], n_numeric: int) -> None:
        super().__init__()
        self.categories = nn.ModuleList(nn.Embedding(size, members) for size in cardinalities)
        for table in self.categories:
            nn.init.zeros_(table.weight)
        self.numbers = StackedLinear(members, n_numeric, 1)

    def forward(self, cats: torch.Tensor, nums: torch.Tensor) -> torch.Tensor:
        members = self.numbers.weight.shape[0]
        out = self.numbers(nums.unsqueeze(0).expand(members, *nums.shape)).squeeze(2)
        for j, table in enumerate(self.categories):
            out = out + table(cats[:, j]).T
        return out


class TabularEnsemble(nn.Module):
    """``members`` :class:`TabularNet` s of one shape, trained side by side as one module (a deep
    ensemble): each member has its own embeddings, layers and initial weights and learns from its
    own loss on the same batches, its dropout masks its own; their matrix products run stacked, one
    batched product per layer for all members: a step costs less than as many nets one after
    another (docs/studies/2026-11-29-the-mlp-as-an-ensemble.md).

    In training mode ``forward`` gives each member's logit, [n, members], and the training loop
    (:func:`jobs.training.steps.batch_loss`) scores every member on its own; in eval mode one logit
    per row, that of the members' mean probability, so the model predicts, calibrates and serves
    as any net does. Averaging nets trained from other initial weights ranks a day's flights better
    and steadier than one of them (docs/training.md, "The MLP as an ensemble")."""

    def __init__(
        self, cardinalities: list[int], n_numeric: int, embedding_dim: int, hidden_units: list[int],
        dropout: float = 0.0, wide: bool | str = False, members: int = 2,
    ) -> None:
        super().__init__()
        if members < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {members}")
        self.members, self.embedding_dim = members, embedding_dim
        self.embeddings = nn.ModuleList(nn.Embedding(size, members * embedding_dim) for size in cardinalities)
        self.dropout = nn.Dropout(dropout)  # no weights: the same module zeroes embeddings and hidden outputs
        width = embedding_dim * len(cardinalities) + n_numeric
        self.wide = StackedLinear(members, width, 1) if wide is True else None
        self.onehot = OneHotLinear(members, cardinalities, n_numeric) if wide == "onehot" else None
        self.hidden = nn.ModuleList()
        for units in hidden_units:
            self.hidden.append(StackedLinear(members, width, units))
            width = units
        self.out = StackedLinear(members, width, 1)

    def member_logits(self, cats: torch.Tensor, nums: torch.Tensor) -> torch.Tensor:
        """Each member's logit of each row, [members, n]."""
        n, k = len(cats), self.members
        embedded = [emb(cats[:, j]).view(n, k, self.embedding_dim) for j, emb in enumerate(self.embeddings)]
        inputs = self.dropout(torch.cat(embedded, dim=2)).transpose(0, 1) if embedded else nums.new_zeros(k, n, 0)
        inputs = torch.cat([inputs, nums.unsqueeze(0).expand(k, n, nums.shape[1])], dim=2)
        hidden = inputs
        for layer in self.hidden:
            hidden = self.dropout(torch.relu(layer(hidden)))
        out = self.out(hidden) if self.wide is None else self.out(hidden) + self.wide(inputs)
        out = out.squeeze(2)
        return out if self.onehot is None else out + self.onehot(cats, nums)

    def forward(self, cats: torch.Tensor, nums: torch.Tensor) -> torch.Tensor:
        logits = self.member_logits(cats, nums)
        if self.training:
            return logits.transpose(0, 1)
        # logit of the mean probability: log(mean p) - log(mean (1 - p)), the log of k cancelling
        return (torch.logsumexp(nn.functional.logsigmoid(logits), dim=0)
                - torch.logsumexp(nn.functional.logsigmoid(-logits), dim=0))


def build_net(pre: Preprocessor, hyper: dict[str, Any]) -> nn.Module:
    """The default model (``train.model``): :class:`TabularNet` sized by the preprocessor, with
    ``hyper``'s ``embedding_dim``, ``hidden_units``, ``dropout`` (0 when absent) and ``wide`` (a
    linear term beside the MLP, :class:`TabularNet`; false when absent); with ``members`` above 1, a
    :class:`TabularEnsemble` of that many such nets."""
    wide = hyper.get("wide", False)
    shape = (pre.cardinalities, len(pre.numeric), hyper["embedding_dim"], list(hyper["hidden_units"]),
             float(hyper.get("dropout", 0.0)), wide if wide == "onehot" else bool(wide))
    members = int(hyper.get("members", 1))
    return TabularEnsemble(*shape, members=members) if members > 1 else TabularNet(*shape)


def build_model(builder: str, pre: Preprocessor, hyper: dict[str, Any]) -> nn.Module:
    """The net ``builder`` (``module:function``, called with the preprocessor and the
    hyperparameters) makes: any torch module whose ``forward(cats, nums)`` gives one logit per row,
    ``cats`` the category indices [n, k] and ``nums`` the standardised numbers [n, m]."""
    module, _, name = builder.partition(":")
    return getattr(importlib.import_module(module), name)(pre, hyper)


def predict_proba(net: nn.Module, pre: Preprocessor, frame: pd.DataFrame) -> np.ndarray:
    """Probabilities for the rows of ``frame``, in order, as float64, on whatever device ``net`` is."""
    cats, nums = pre.encode(frame)
    device = next(net.parameters()).device
    return predict_encoded(net, torch.from_numpy(cats).to(device), torch.from_numpy(nums).to(device))


def predict_encoded(net: nn.Module, cats: torch.Tensor, nums: torch.Tensor) -> np.ndarray:
    """Probabilities for encoded rows (:meth:`Preprocessor.encode`'s two arrays as tensors on the
    net's device), as float64 on the host; always in float32, whatever precision trained the net."""
    net.eval()
    with torch.inference_mode():
        return torch.sigmoid(net(cats, nums)).double().cpu().numpy()


MODEL_FILE, PREPROCESSOR_FILE, HYPER_FILE = "model_state.pt", "preprocessor.json", "hyperparameters.json"


def save_artifacts(
    net: nn.Module, pre: Preprocessor, hyper: dict[str, Any], folder: Path, builder: str = DEFAULT_MODEL,
    calibration: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Write the weights, preprocessor, the builder with its hyperparameters and the calibration
    record (:mod:`jobs.model.calibration`; None: none, the scale is 1.0); returns the pyfunc
    artifacts map."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), folder / MODEL_FILE)
    (folder / PREPROCESSOR_FILE).write_text(pre.to_json())
    (folder / HYPER_FILE).write_text(json.dumps({"builder": builder, "hyperparameters": hyper}, sort_keys=True))
    artifacts = {name: str(folder / name) for name in (MODEL_FILE, PREPROCESSOR_FILE, HYPER_FILE)}
    return {**artifacts, **(save_record(calibration, folder) if calibration is not None else {})}


def log_pyfunc(
    net: nn.Module, pre: Preprocessor, hyper: dict[str, Any], example: pd.DataFrame, builder: str = DEFAULT_MODEL,
    calibration: dict[str, Any] | None = None,
) -> Any:
    """Log the model to the active MLflow run as a pyfunc; returns MLflow's ModelInfo.

    The signature and input example come from ``example`` (rows of feature columns); the
    model's own code travels with it (:func:`code_paths`) so it loads wherever MLflow can read it.
    ``calibration``: the record of :func:`jobs.model.calibration.calibrate`, whose logit scale the
    pyfunc applies to every probability (None: none).
    """
    import tempfile

    import mlflow.pyfunc
    from mlflow.models import infer_signature

    example = signature_example(example, [*pre.categorical, *pre.numeric], pre.categorical)
    with tempfile.TemporaryDirectory() as tmp:
        return mlflow.pyfunc.log_model(
            name="model",
            python_model=_classifier_class()(),
            artifacts=save_artifacts(net, pre, hyper, Path(tmp), builder, calibration),
            signature=infer_signature(example, apply_scale(predict_proba(net, pre, example),
                                                           (calibration or {}).get("logit_scale", 1.0))),
            input_example=example,
            model_config={"device": "cpu"},  # scoring may override it: load_model(..., model_config=...)
            code_paths=code_paths(builder, Path(tmp)),
            pip_requirements=[
                f"torch=={torch.__version__.split('+')[0]}",
                f"mlflow=={mlflow.__version__}",
                f"pandas=={pd.__version__}",
                f"numpy=={np.__version__}",
            ],
        )


def code_paths(builder: str, folder: Path) -> list[str]:
    """What a logged model needs to load anywhere, copied under ``folder``: ``jobs/__init__.py`` and
    ``jobs/model/`` (this package imports nothing else of ``jobs``), and the builder's own
    top-level package or module when it lives elsewhere (a user's model)."""
    import importlib.util

    paths = [package_model_code(folder)]
    top = builder.partition(":")[0].split(".")[0]
    if top != "jobs":
        spec = importlib.util.find_spec(top)
        if spec is None:
            raise ValueError(f"train.model {builder!r}: no module {top!r} to log with the model")
        locations = list(spec.submodule_search_locations or [])
        paths.append(locations[0] if locations else str(spec.origin))
    return paths


def signature_example(rows: pd.DataFrame, inputs: list[str], categorical: list[str]) -> pd.DataFrame:
    """The input example a logged model's signature is inferred from: the ``inputs`` in order, the
    ``categorical`` ones as plain object columns (MLflow's schema then types them as strings)."""
    example = rows[list(inputs)].copy()
    for col in categorical:
        example[col] = example[col].astype(object)
    return example


def package_model_code(folder: Path) -> str:
    """A ``jobs`` folder under ``folder`` holding only ``__init__.py`` and ``model/``: the code a
    logged model (this one or a baseline) ships, so loading it needs none of the pipeline."""
    source = Path(__file__).resolve().parent
    target = folder / "code" / source.parent.name
    shutil.copytree(source, target / source.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(source.parent / "__init__.py", target / "__init__.py")
    return str(target)


@functools.cache
def _classifier_class() -> type:
    """:class:`TabularClassifier`, defined here so that its base class (MLflow's) is imported only
    where a model is logged or loaded."""
    import mlflow.pyfunc

    class TabularClassifier(mlflow.pyfunc.PythonModel):
        """MLflow pyfunc: a DataFrame of feature columns in, the positive-class probability out."""

        def load_context(self, context: Any) -> None:  # an mlflow.pyfunc.PythonModelContext
            """Loads onto ``model_config["device"]`` (``mlflow.pyfunc.load_model(..., model_config=...)``),
            the CPU by default. The logit scale: the model's calibration (1.0 when logged without one)."""
            torch.set_num_threads(1)  # one thread per Python worker; Spark runs one worker per core
            device = torch.device((context.model_config or {}).get("device", "cpu"))
            self.pre = Preprocessor.from_json(Path(context.artifacts[PREPROCESSOR_FILE]).read_text())
            saved = json.loads(Path(context.artifacts[HYPER_FILE]).read_text())
            if "builder" not in saved:  # logged before the model was chosen by config: the default, as is
                saved = {"builder": DEFAULT_MODEL, "hyperparameters": saved}
            self.net = build_model(saved["builder"], self.pre, saved["hyperparameters"])
            self.net.load_state_dict(torch.load(context.artifacts[MODEL_FILE], map_location="cpu", weights_only=True))
            self.net.to(device).eval()
            self.device = device
            self.logit_scale = read_scale(context.artifacts)
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
            self._buffer_rows = 0

        def predict(
            self, context: Any, model_input: pd.DataFrame, params: dict | None = None
        ) -> np.ndarray:
            return apply_scale(predict_proba(self.net, self.pre, model_input), self.logit_scale)

        def input_buffers(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
            """Host arrays for ``rows`` encoded rows, to fill before :meth:`predict_codes`: category codes
            [k, rows] int32 and z-scores [m, rows] float32, one row per feature so that each input column
            is one contiguous copy. Page-locked when the model is on a GPU (the copy to the device is then
            one DMA transfer); reused from call to call, so fill and predict before asking again."""
            k, m = len(self.pre.categorical), len(self.pre.numeric)
            if self._buffers is None or self._buffer_rows < rows:
                pin = self.device.type == "cuda"
                self._buffers = (torch.empty(k * rows, dtype=torch.int32, pin_memory=pin),
                                 torch.empty(m * rows, dtype=torch.float32, pin_memory=pin))
                self._buffer_rows = rows
            cats, nums = self._buffers  # flat, so that the first rows of each feature stay one block
            return cats[: k * rows].view(k, rows).numpy(), nums[: m * rows].view(m, rows).numpy()

        def predict_codes(self, cats: np.ndarray, nums: np.ndarray) -> np.ndarray:
            """Probabilities for rows encoded elsewhere (for example by Spark,
            ``jobs.scoring.predictor.encoded_columns``), as :meth:`input_buffers` lays them out; equal
            to :meth:`predict` on the raw rows (the calibration's logit scale applied alike)."""
            to = {"device": self.device, "non_blocking": True}
            probabilities = predict_encoded(self.net, torch.from_numpy(cats).to(**to).T,
                                            torch.from_numpy(nums).to(**to).T)
            return apply_scale(probabilities, self.logit_scale)

    TabularClassifier.__qualname__ = "TabularClassifier"  # pickled by reference: jobs.model.tabular.TabularClassifier
    return TabularClassifier


def __getattr__(name: str) -> Any:
    """``TabularClassifier`` (the pyfunc), made on first use, the same class every time: the logged
    models unpickle it from here by that name."""
    if name == "TabularClassifier":
        return _classifier_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
