"""Drift: how far a scored day's inputs and predictions have moved from what the model was trained on.

Training writes a *baseline* with the model (an MLflow artifact of its run, ``drift/baseline.json``):
for each numeric feature the decile edges of the training window and the share of rows in each
bin (nulls in a bin of their own); for each categorical feature the share of each vocabulary
category and of the rest (categories the model does not know, and nulls: the model sees them all
as "unknown"); and the same bins for the model's predictions on its holdout window.

Scoring counts the day's rows into the same bins and reports, per feature, the population
stability index ``PSI = sum((a - e) * ln(a / e))`` over the bins (0: the same; > 0.1 a shift;
> 0.2 a large one), the share of rows with categories the model does not know against the
baseline's share, and the PSI of the predictions. A day *drifts* when a monitored feature's PSI,
an increase of the unknown share or (when it has a threshold) the predictions' PSI passes its
threshold (``score.drift``). A day with fewer rows than ``score.drift.min_rows`` is not judged on
its own: its bins are noise (one row fills one bin, PSI ~ 8). It is judged pooled with the days
before it that the same model scored (their counts are in their reports), up to
``score.drift.pool_days`` days in all, once they hold ``min_rows`` rows (:func:`with_pooled`), so
that a small feed's drift is judged at all; short of that its report has status ``too_few_rows``,
not drift, and starts no retraining.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from jobs.config import DriftSpec
    from jobs.model.tabular import Preprocessor

PREDICTION = "probability"
BASELINE_ARTIFACT = "drift/baseline.json"  # in the training run's artifacts
SMOOTHING = 1e-4  # shares below this count as this much: an empty bin does not make PSI infinite


def _numeric_bucket(col: str, edges: list[float]) -> Any:
    """Spark expression: the bin of ``col`` (0..len(edges); nulls and NaN in bin len(edges) + 1)."""
    from pyspark.sql import functions as F

    value = F.col(col).cast("double")
    index = sum((F.when(value >= edge, 1).otherwise(0) for edge in edges), F.lit(0))
    return F.when(value.isNull() | F.isnan(value), F.lit(len(edges) + 1)).otherwise(index)


def _category_bucket(col: str, vocab: list[str]) -> Any:
    """Spark expression: 1 + the category's index in ``vocab``; 0 for anything else (and nulls)."""
    from pyspark.sql import functions as F

    if not vocab:
        return F.lit(0)
    return F.coalesce(F.array_position(F.array(*[F.lit(v) for v in vocab]), F.col(col).cast("string")), F.lit(0))


def bucket_counts(
    df: DataFrame, edges: dict[str, list[float]], vocab: dict[str, list[str]]
) -> dict[str, list[int]]:
    """Rows per bin of every numeric column in ``edges`` and categorical column in ``vocab``, in one
    Spark job: numeric bins 0..len(edges)+1 (the last: null), categorical 0 (unknown) .. len(vocab)."""
    return bucket_counts_by(df, edges, vocab, None).get(None) or _empty_counts(edges, vocab)


def _empty_counts(edges: dict[str, list[float]], vocab: dict[str, list[str]]) -> dict[str, list[int]]:
    return {c: [0] * (len(e) + 2) for c, e in edges.items()} | {c: [0] * (len(v) + 1) for c, v in vocab.items()}


def bucket_counts_by(
    df: DataFrame, edges: dict[str, list[float]], vocab: dict[str, list[str]], key: str | None
) -> dict[Any, dict[str, list[int]]]:
    """:func:`bucket_counts` for each value of the column ``key`` (None: the whole frame, under
    None), still in one Spark job; a value without rows is absent."""
    from pyspark.sql import functions as F

    from jobs.runtime.session import without_whole_stage_codegen

    pairs = [F.struct(F.lit(c).alias("feature"), _numeric_bucket(c, e).cast("int").alias("bin"))
             for c, e in edges.items()]
    pairs += [F.struct(F.lit(c).alias("feature"), _category_bucket(c, v).cast("int").alias("bin"))
              for c, v in vocab.items()]
    if not pairs:
        return {}
    keys = [F.col(key).alias("key")] if key else [F.lit(None).alias("key")]
    with without_whole_stage_codegen(df.sparkSession):  # ~10 case expressions a column: too big to compile
        rows = (df.select(*keys, F.explode(F.array(*pairs)).alias("p"))
                .groupBy("key", "p.feature", "p.bin").count().collect())
    counts: dict[Any, dict[str, list[int]]] = {}
    for row in rows:
        counts.setdefault(row["key"], _empty_counts(edges, vocab))[row["feature"]][row["bin"]] = int(row["count"])
    return counts


def _shares(counts: list[int]) -> list[float]:
    total = sum(counts)
    return [c / total for c in counts] if total else [0.0] * len(counts)


def decile_edges(values: Any, bins: int) -> list[float]:
    """Distinct inner quantile edges of ``values`` (NaN ignored)."""
    array = np.asarray(values, dtype=np.float64)
    array = array[~np.isnan(array)]
    if not len(array):
        return []
    return sorted({float(q) for q in np.quantile(array, np.linspace(0, 1, bins + 1)[1:-1])})


def build_baseline(
    features: DataFrame, pre: Preprocessor, predictions: Any, bins: int = 10, local_max_rows: int = 0
) -> dict[str, Any]:
    """The baseline a model carries: feature bins over its training window (``features``; see
    :func:`feature_bins` for ``local_max_rows``) and the bins of its ``predictions`` (probabilities
    on the holdout)."""
    return with_predictions(feature_bins(features, pre, bins, local_max_rows), predictions, bins)


def feature_bins(features: DataFrame, pre: Preprocessor, bins: int = 10, local_max_rows: int = 0) -> dict[str, Any]:
    """A baseline's feature part (:func:`build_baseline`): the same for every model of one training
    window and preprocessor, so models trained side by side compute it once. A window of at most
    ``local_max_rows`` rows is binned in the driver's process (:func:`local_feature_bins`, the same
    bins): for a small window Spark's two wide queries cost seconds of planning and compiling each."""
    rows = int(features.count())
    if rows <= local_max_rows:
        return local_feature_bins(local_columns(features, pre), pre, bins)
    probs = [i / bins for i in range(1, bins)]
    quantiles = features.approxQuantile(list(pre.numeric), probs, 0.001) if pre.numeric else []
    edges = {c: sorted(set(q)) for c, q in zip(pre.numeric, quantiles, strict=True)}
    counts = bucket_counts(features, edges, pre.vocab)
    return _feature_part(rows, edges, counts, pre)


def _feature_part(rows: int, edges: dict[str, list[float]], counts: dict[str, list[int]], pre: Preprocessor
                  ) -> dict[str, Any]:
    return {
        "rows": rows,
        "numeric": {c: {"edges": edges[c], "shares": _shares(counts[c])} for c in pre.numeric},
        "categorical": {c: {"vocab": pre.vocab[c], "shares": _shares(counts[c])} for c in pre.categorical},
    }


def local_columns(features: DataFrame, pre: Preprocessor) -> Any:
    """The columns that :func:`local_feature_bins` bins, as a pandas frame: numeric ones as doubles
    (nulls as NaN) and categorical ones as Spark's strings of them, as Spark's bins compare them."""
    from pyspark.sql import functions as F

    return features.select(*[F.col(c).cast("double").alias(c) for c in pre.numeric],
                           *[F.col(c).cast("string").alias(c) for c in pre.categorical]).toPandas()


def local_feature_bins(frame: Any, pre: Preprocessor, bins: int = 10) -> dict[str, Any]:
    """:func:`feature_bins` of a pandas frame (:func:`local_columns`): exact quantiles where Spark's
    are within 0.1% of the rank (each edge a value of the column, as Spark's are), counted as
    :func:`bucket_counts` counts."""
    probs = [i / bins for i in range(1, bins)]
    edges = {}
    for col in pre.numeric:
        values = frame[col].to_numpy(dtype=np.float64, na_value=np.nan)
        values = values[~np.isnan(values)]
        edges[col] = sorted(set(np.quantile(values, probs, method="inverted_cdf").tolist())) if len(values) else []
    return _feature_part(len(frame), edges, local_bucket_counts(frame, edges, pre.vocab), pre)


def local_bucket_counts(frame: Any, edges: dict[str, list[float]], vocab: dict[str, list[str]]) -> dict[str, list[int]]:
    """:func:`bucket_counts` of a pandas frame whose numeric columns are doubles and categorical
    ones strings (:func:`local_columns`): the same bins, the same counts."""
    counts = {}
    for col, found in edges.items():
        values = frame[col].to_numpy(dtype=np.float64, na_value=np.nan)
        index = np.where(np.isnan(values), len(found) + 1, np.searchsorted(np.asarray(found, dtype=np.float64), values,
                                                                              side="right"))
        counts[col] = np.bincount(index, minlength=len(found) + 2).tolist()
    for col, words in vocab.items():
        position: dict[str, int] = {}
        for i, word in enumerate(words):
            position.setdefault(str(word), i + 1)  # array_position: the first match
        index = frame[col].map(position).fillna(0).to_numpy(dtype=np.int64)  # unknown and null: 0
        counts[col] = np.bincount(index, minlength=len(words) + 1).tolist()
    return counts


def with_predictions(bins_of_features: dict[str, Any], predictions: Any, bins: int = 10) -> dict[str, Any]:
    """A model's whole baseline: :func:`feature_bins`' part and the bins of its ``predictions``."""
    prediction_edges = decile_edges(predictions, bins)
    prediction_counts = np.bincount(
        np.searchsorted(prediction_edges, np.asarray(predictions, dtype=np.float64), side="right"),
        minlength=len(prediction_edges) + 2,
    )
    return {**bins_of_features, PREDICTION: {"edges": prediction_edges, "shares": _shares(prediction_counts.tolist())}}


def psi(expected: list[float], actual: list[float]) -> float:
    """Population stability index between two share vectors over the same bins."""
    total = 0.0
    for e, a in zip(expected, actual, strict=True):
        e, a = max(e, SMOOTHING), max(a, SMOOTHING)
        total += (a - e) * math.log(a / e)
    return total


def measure(
    baseline: dict[str, Any], features: DataFrame, predictions: DataFrame, spec: DriftSpec
) -> dict[str, Any]:
    """Compare a day's ``features`` and ``predictions`` (a ``probability`` column) with ``baseline``."""
    edges, vocab, prediction_edges = _bins(baseline)
    counts = bucket_counts(features, edges, vocab) | bucket_counts(predictions, prediction_edges, {})
    return judge(baseline, counts, spec)


def _bins(baseline: dict[str, Any]) -> tuple[dict[str, list[float]], dict[str, list[str]], dict[str, list[float]]]:
    """A baseline's bins: the numeric features' edges, the categorical features' vocabularies and
    the predictions' edges (under ``probability``)."""
    return ({c: b["edges"] for c, b in baseline["numeric"].items()},
            {c: b["vocab"] for c, b in baseline["categorical"].items()},
            {PREDICTION: baseline[PREDICTION]["edges"]})


def measure_days(
    baseline: dict[str, Any], features: DataFrame, predictions: DataFrame, spec: DriftSpec, days: list[Any],
    key: str | None = None,
) -> dict[Any, dict[str, Any]]:
    """:func:`measure` for each of ``days`` (the values of the column ``key`` in both frames, by
    default the lake's partition column) in
    two Spark jobs, whatever the number of days; a day without rows is judged on none."""
    from jobs.lake.layout import PARTITION, partition_value

    key = key or PARTITION
    edges, vocab, prediction_edges = _bins(baseline)
    inputs = {partition_value(k): v for k, v in bucket_counts_by(features, edges, vocab, key).items()}
    outputs = {partition_value(k): v for k, v in bucket_counts_by(predictions, prediction_edges, {}, key).items()}
    empty = _empty_counts(edges, vocab) | _empty_counts(prediction_edges, {})
    found = {}
    for day in days:
        counts = {**empty, **inputs.get(day, {}), **outputs.get(day, {})}
        report = judge(baseline, counts, spec)
        if report["status"] == "too_few_rows":  # kept: a later day pools them
            report["counts"] = counts
        found[day] = report
    return found


def with_pooled(baseline: dict[str, Any], report: dict[str, Any], earlier: list[tuple[str, dict[str, Any]]],
                spec: DriftSpec) -> dict[str, Any]:
    """A day's ``report`` of too few rows judged again on its counts and those of ``earlier``
    (``(day, report)`` of the days before it that the same model scored, newest first; a report
    without counts, or of another model, ends the pool): the days taken newest first until they
    hold ``spec.min_rows`` rows, ``spec.pool_days`` days in all. The report keeps the day's own
    ``rows`` and ``counts``, and says what was pooled (``pooled``: the days, the rows)."""
    own = report["counts"]
    total, days = {column: list(values) for column, values in own.items()}, []
    for day, other in earlier[: max(spec.pool_days - 1, 0)]:
        if sum(total[PREDICTION]) >= spec.min_rows:
            break
        if "counts" not in other or other.get("model_run_id") != report.get("model_run_id"):
            break
        for column, values in other["counts"].items():
            total[column] = [a + b for a, b in zip(total[column], values, strict=True)]
        days.append(day)
    if not days:
        return report
    judged = judge(baseline, total, spec)
    return {**report, **judged, "rows": report["rows"], "counts": own,
            "pooled": {"days": sorted(days), "rows": sum(total[PREDICTION])}}


def pooled(expected: list[float], counts: list[int], min_expected: float) -> tuple[list[float], list[int]]:
    """The bins a day of ``sum(counts)`` rows can tell apart: those expecting fewer than
    ``min_expected`` of its rows pooled into one bin (and that pool into the smallest other bin
    while it is still short). Returns the pooled expected shares and counts."""
    rows = sum(counts)
    small = {i for i, e in enumerate(expected) if e * rows < min_expected}
    if not small:
        return list(expected), list(counts)
    keep = [i for i in range(len(expected)) if i not in small]
    shares = [expected[i] for i in keep] + [sum(expected[i] for i in small)]
    found = [counts[i] for i in keep] + [sum(counts[i] for i in small)]
    if shares[-1] * rows < min_expected and len(shares) > 1:  # the pool itself short: into the smallest bin
        j = min(range(len(shares) - 1), key=shares.__getitem__)
        shares[j] += shares.pop()
        found[j] += found.pop()
    return shares, found


def chance(expected: list[float], counts: list[int], reference_rows: int) -> float:
    """How likely a day's ``counts`` are as a sample of the reference window's shares: the
    p-value of Pearson's chi-square of homogeneity (the window's own sampling error counted)."""
    from scipy.stats import chi2

    rows = sum(counts)
    cells = [(c, e) for c, e in zip(counts, expected, strict=True) if e > 0]
    if rows == 0 or len(cells) < 2:
        return 1.0
    statistic = sum((c - rows * e) ** 2 / (rows * e) for c, e in cells) / (1 + rows / max(reference_rows, 1))
    return float(chi2.sf(statistic, len(cells) - 1))


def unknown_chance(baseline_share: float, unknown: int, rows: int, reference_rows: int) -> float:
    """How likely ``unknown`` of ``rows`` with categories the model does not know are at the
    training window's share of them (one-sided binomial; a window without any counts as half a row)."""
    from scipy.stats import binom

    share = max(baseline_share, 0.5 / max(reference_rows, 1))
    return float(binom.sf(unknown - 1, rows, share)) if rows else 1.0


def judge(baseline: dict[str, Any], counts: dict[str, list[int]], spec: DriftSpec) -> dict[str, Any]:
    """The drift report of a day from its rows per bin (:func:`bucket_counts`, the predictions'
    under ``probability``).

    A monitored feature drifts when its PSI over the bins the day can tell apart (:func:`pooled`)
    passes ``psi_threshold`` and the move is also unlikely as sampling noise: its chance
    (:func:`chance`) below ``alpha`` shared among every test of the day (Bonferroni), so that a day
    of a few rows is not called drifted for the noise of its shares."""
    rows = sum(counts[PREDICTION])
    reference_rows = int(baseline["rows"])
    monitored = [c for kind in ("numeric", "categorical") for c in baseline[kind] if not spec.ignores(c)]
    tests = len(monitored) + sum(1 for c in baseline["categorical"] if c in monitored)
    level = spec.alpha / max(tests, 1)
    features_out: dict[str, dict[str, Any]] = {}
    reasons = []
    for kind in ("numeric", "categorical"):
        for col, base in baseline[kind].items():
            expected, found = pooled(base["shares"], counts[col], spec.min_expected_rows)
            shares = _shares(counts[col])
            entry: dict[str, Any] = {"kind": kind, "psi": round(psi(expected, _shares(found)), 6),
                                     "bins": len(found), "chance": round(chance(expected, found, reference_rows), 6),
                                     "monitored": col in monitored}
            if kind == "categorical":
                entry["unknown_share"] = round(shares[0], 6)
                entry["baseline_unknown_share"] = round(base["shares"][0], 6)
                rise = shares[0] - base["shares"][0]
                if entry["monitored"] and rise > spec.unknown_share_threshold \
                        and unknown_chance(base["shares"][0], counts[col][0], rows, reference_rows) < level:
                    reasons.append(f"{col}: {shares[0]:.1%} of rows have categories the model does not know "
                                   f"(training: {base['shares'][0]:.1%})")
            if entry["monitored"] and entry["psi"] > spec.psi_threshold and entry["chance"] < level:
                reasons.append(f"{col}: PSI {entry['psi']:.3f} > {spec.psi_threshold} (chance {entry['chance']:.1e})")
            features_out[col] = entry
    prediction_psi = round(psi(baseline[PREDICTION]["shares"], _shares(counts[PREDICTION])), 6)
    if spec.prediction_psi_threshold is not None and prediction_psi > spec.prediction_psi_threshold:
        reasons.append(f"predictions: PSI {prediction_psi:.3f} > {spec.prediction_psi_threshold}")
    status = "drifted" if reasons else "stable"
    if rows < spec.min_rows:  # the PSIs are still reported, but they say nothing about drift
        status, reasons = "too_few_rows", []
    return {
        "rows": rows,
        "baseline_rows": baseline["rows"],
        "status": status,
        "drifted": status == "drifted",
        "reasons": reasons,
        "thresholds": {"psi": spec.psi_threshold, "prediction_psi": spec.prediction_psi_threshold,
                       "unknown_share_increase": spec.unknown_share_threshold, "min_rows": spec.min_rows,
                       "alpha": spec.alpha, "chance": level, "min_expected_rows": spec.min_expected_rows},
        "features": features_out,
        "prediction": {"psi": prediction_psi, "baseline_shares": baseline[PREDICTION]["shares"],
                       "shares": _shares(counts[PREDICTION]), "edges": baseline[PREDICTION]["edges"]},
    }


def headline(report: dict[str, Any], top: int = 3) -> str:
    """One line on a drift report: the verdict, the highest PSIs among monitored features, the
    predictions' PSI."""
    monitored = sorted(((c, e["psi"]) for c, e in report["features"].items() if e["monitored"]), key=lambda x: -x[1])
    verdict = "DRIFTED (" + "; ".join(report["reasons"]) + ")" if report["drifted"] else "none over the thresholds"
    pooled = report.get("pooled")
    if report.get("status") == "too_few_rows":
        rows = f"{pooled['rows']} with {len(pooled['days'])} day(s) before" if pooled else report["rows"]
        verdict = (f"too few rows to judge drift ({rows} < score.drift.min_rows "
                   f"{report['thresholds']['min_rows']}); not drift")
    elif pooled:
        verdict += f" (pooled with {len(pooled['days'])} day(s) before: {pooled['rows']} rows)"
    highest = ", ".join(f"{c} {v:.3f}" for c, v in monitored[:top]) or "no monitored features"
    return f"{verdict}; highest monitored PSI: {highest}; predictions PSI {report['prediction']['psi']:.3f}"


def load_baseline(run_id: str) -> dict[str, Any] | None:
    """The drift baseline the training run logged, or None for a model trained without one."""
    import json
    import tempfile

    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=BASELINE_ARTIFACT, dst_path=tmp)
        except (MlflowException, OSError):
            return None
        with open(path) as handle:
            return json.load(handle)


def drift_figure(report: dict[str, Any]) -> Any:
    """PSI per feature (monitored features in colour, the threshold as a line) beside the day's
    prediction histogram against the baseline's: the picture a person checks first."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.5), dpi=100, layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[3, 2])
    names = sorted(report["features"], key=lambda c: report["features"][c]["psi"])
    values = [report["features"][c]["psi"] for c in names]
    def colour(name: str) -> str:
        entry = report["features"][name]
        if not entry["monitored"]:
            return "lightgrey"
        return "tab:red" if entry["psi"] > report["thresholds"]["psi"] else "tab:blue"

    colours = [colour(c) for c in names]
    left.barh(names, values, color=colours)
    left.axvline(report["thresholds"]["psi"], color="black", linestyle="--", label="threshold")
    left.set(xlabel="PSI against the training window", title="Feature drift (grey: not monitored)")
    left.legend(loc="lower right")
    pred = report["prediction"]
    x = np.arange(len(pred["shares"]))
    right.bar(x - 0.2, pred["baseline_shares"], width=0.4, label="holdout (training)")
    right.bar(x + 0.2, pred["shares"], width=0.4, label="this day")
    right.set(xlabel="prediction decile of the holdout (last bar: missing)", ylabel="share of rows",
              title=f"Predictions (PSI {pred['psi']:.3f})")
    right.legend()
    return fig
