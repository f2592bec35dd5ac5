"""Study: the MLP against the bar, on the features the pipeline builds, window by window.

``python -m studies.model_families --help`` lists its options.

For each window (the holdout's last day), the training, validation and holdout days as the train
job cuts them (``train.validation_days``, ``holdout_days``, up to ``--max-train-days`` of training
days over what the features zone holds), encoded by the pipeline's own
:class:`~jobs.model.tabular.Preprocessor` (fitted the way the train job fits it), it fits in this
one process: logistic regression (scikit-learn, the MLlib baseline's stand-in), XGBoost with the
sweep's first param set, and the pipeline's MLP (``jobs.model.tabular.build_net`` with
``train.hyperparameters``, AdamW with ``train.weight_decay``, ``train.epochs`` at
``train.learning_rate``) once per seed, and the unregularised MLP that came before (no dropout or
weight decay, [64, 32], 4 epochs at 0.003) for comparison. The measure is the replay's: the mean
over the holdout days of each day's ROC AUC (ranking one day's flights).

With ``--sweep``, also the MLP as the sweep trains it, per learning-rate schedule
(``train.lr_schedule``: constant and cosine): one net per ``sweep.learning_rate`` (seed
``train.seed``), the one whose last epoch ranks the validation days best (pooled ROC AUC, the
sweep's choice: ``mlp_<schedule>``), the epoch of each net that ranked them best
(``train.keep_best_epoch``: ``mlp_<schedule>_best_epoch``), and the mean of the nets'
probabilities (``mlp_<schedule>_mean``); each judged per day and pooled over the holdout (how the
replay's window table compares families), with each family's pooled ROC AUC beside. And blends
(the mean of members' probabilities, as ``sweep.blend`` builds them): ``blend`` of logistic
regression and XGBoost, ``blend_mlp`` with the ``train.lr_schedule`` sweep's choice as a third
member, ``blend_mlp_mean`` with the mean of its candidates as the third. ``--schedules`` limits the
schedules tried.

With ``--members 2,4``, also the MLP as an ensemble of that many nets (``train.hyperparameters.members``:
:class:`~jobs.model.tabular.TabularEnsemble`, at ``train.learning_rate`` and ``train.lr_schedule``, seed
``train.seed``): ``mlp_members<K>``, judged per day and pooled. ``--mlp-only`` fits only those and the
``--sweep`` MLPs (no logistic regression, XGBoost or the seeds' nets): a pass over a year's windows
in minutes, to set against the bar of the replay that built the features.

One process, no Spark, no TorchDistributor: the models, not the machinery (the train job trains
the same net on 2 ranks with batches of 512 per rank). Prints a table and writes
``model_families.json`` to ``--out``.
The features zone comes from the pipeline (``make replay`` leaves one in ``.pipeline/replay/lake``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

DEFAULT_WINDOWS = "2013-02-20,2013-03-10,2013-04-15,2013-04-30"
BEFORE = {"hidden_units": [64, 32], "dropout": 0.0, "weight_decay": 0.0, "epochs": 4, "learning_rate": 0.003}


def daily_auc(days: Any, labels: Any, scores: Any) -> float:
    """The mean over the days of each day's ROC AUC (days with one class left out)."""
    import numpy as np
    import pandas as pd
    from sklearn.metrics import roc_auc_score

    frame = pd.DataFrame({"day": np.asarray(days), "y": np.asarray(labels), "p": np.asarray(scores)})
    return float(np.mean([roc_auc_score(g.y, g.p) for _, g in frame.groupby("day") if g.y.nunique() > 1]))


def window_rows(frame: Any, run_date: dt.date, train: Any, max_train_days: int) -> tuple[Any, Any]:
    """(training rows, holdout rows) of the window ending with ``run_date``."""
    holdout_start = run_date - dt.timedelta(days=train.holdout_days - 1)
    validation_start = holdout_start - dt.timedelta(days=train.validation_days)
    first = validation_start - dt.timedelta(days=max_train_days)
    training = frame[(frame.day >= first) & (frame.day < validation_start)]
    return training, frame[(frame.day >= holdout_start) & (frame.day <= run_date)]


def fit_preprocessor(rows: Any, spec: Any, min_count: int, clip: bool = False) -> Any:
    """The train job's preprocessor in pandas; with ``clip`` (``train.clip_to_training_range``) the
    range encoding clips to, as the pipeline's records it."""
    from jobs.model.tabular import Preprocessor, safe_std

    numeric = spec.model_numeric
    vocab = {c: sorted(v for v, n in rows[c].value_counts().items() if n >= min_count) for c in spec.categorical}
    mean = {c: float(rows[c].mean()) if rows[c].notna().any() else 0.0 for c in numeric}
    ranged = [c for c in numeric if clip and rows[c].notna().any()]
    return Preprocessor(list(spec.categorical), list(numeric), vocab, mean,
                        {c: safe_std(rows[c].std(ddof=0)) for c in numeric},
                        low={c: float(rows[c].min()) for c in ranged}, high={c: float(rows[c].max()) for c in ranged})


def fit_mlp(pre: Any, training: Any, holdout: Any, label: str, settings: dict[str, Any], seed: int,
            validation: Any = None) -> Any:
    """The pipeline's net trained with ``settings`` in this process (``schedule``: the learning rate
    over the steps, ``jobs.training.steps.learning_rate_at``); the holdout's probabilities. With
    ``validation`` rows: ``{"holdout", "validation_score"}`` of the last epoch and ``{"best",
    "best_score", "best_epoch"}`` of the epoch whose net ranked the validation rows best (pooled ROC
    AUC)."""
    import torch

    from jobs.metrics import roc_auc
    from jobs.model.tabular import build_net, predict_proba
    from jobs.training.steps import learning_rate_at, train_batches

    torch.manual_seed(seed)
    cats, nums = (torch.from_numpy(a) for a in pre.encode(training))
    labels = torch.tensor(training[label].to_numpy(), dtype=torch.float32)
    net = build_net(pre, {"embedding_dim": 6, **settings.get("hyperparameters", {}),
                          "hidden_units": settings["hidden_units"], "dropout": settings["dropout"]})
    optimizer = torch.optim.AdamW(net.parameters(), lr=settings["learning_rate"],
                                  weight_decay=settings["weight_decay"])
    loss_fn = torch.nn.BCEWithLogitsLoss()
    steps = (len(labels) + 511) // 512
    best: dict[str, Any] = {"best_score": float("-inf")}
    for epoch in range(settings["epochs"]):
        net.train()
        order = torch.randperm(len(labels))
        batches = ((cats[b], nums[b], labels[b]) for b in (order[i:i + 512] for i in range(0, len(labels), 512)))
        train_batches(net, optimizer, loss_fn, batches, torch.device("cpu"),
                      lr_at=lambda step, epoch=epoch: learning_rate_at(
                          settings["learning_rate"], settings.get("schedule", "constant"),
                          epoch * steps + step, steps * settings["epochs"]))
        if validation is not None:
            score = roc_auc(validation[label].to_numpy(), predict_proba(net, pre, validation))
            if score > best["best_score"]:
                best = {"best_score": score, "best_epoch": epoch + 1, "best": predict_proba(net, pre, holdout)}
    if validation is None:
        return predict_proba(net, pre, holdout)
    return {"holdout": predict_proba(net, pre, holdout), "validation_score": score, **best}


def sweep_mlps(pre: Any, training: Any, validation: Any, holdout: Any, label: str, settings: dict[str, Any],
               learning_rates: list[float], seed: int) -> dict[str, Any]:
    """The sweep's MLP candidates (one per learning rate) with ``settings``: the holdout's
    probabilities of the sweep's choice (the last epoch that ranks the validation rows best), of
    each candidate's best epoch on them, chosen alike, and of the candidates' mean."""
    import numpy as np

    nets = [fit_mlp(pre, training, holdout, label, {**settings, "learning_rate": lr}, seed, validation)
            for lr in learning_rates]
    chosen = max(nets, key=lambda n: n["validation_score"])
    best = max(nets, key=lambda n: n["best_score"])
    return {"": chosen["holdout"], "_best_epoch": best["best"],
            "_mean": np.mean([n["holdout"] for n in nets], axis=0), "epochs": [n["best_epoch"] for n in nets]}


def fit_linear(pre: Any, training: Any, holdout: Any, label: str) -> Any:
    """Logistic regression on the one-hot categories and the z-scored numbers."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    def design(rows: Any) -> Any:
        cats, nums = pre.encode(rows)
        onehot = [np.eye(size, dtype=np.float32)[cats[:, j]] for j, size in enumerate(pre.cardinalities)]
        return np.hstack([*onehot, nums])

    model = LogisticRegression(max_iter=300, C=1.0).fit(design(training), training[label])
    return model.predict_proba(design(holdout))[:, 1]


def fit_trees(pre: Any, training: Any, holdout: Any, label: str, params: dict[str, Any]) -> Any:
    """XGBoost (the sweep's param set) on the category codes and the numbers, one thread."""
    import numpy as np
    import xgboost

    def design(rows: Any) -> Any:
        cats, nums = pre.encode(rows)
        return np.hstack([cats.astype(np.float32), nums])

    types = ["c"] * len(pre.categorical) + ["q"] * len(pre.numeric)
    model = xgboost.XGBClassifier(**params, tree_method="hist", n_jobs=1, random_state=0,
                                  feature_types=types, enable_categorical=True, max_cat_to_onehot=1)
    model.fit(design(training), training[label])
    return model.predict_proba(design(holdout))[:, 1]


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    import pandas as pd
    import torch

    from jobs.config import load_config
    from jobs.lake.layout import PARTITION

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--features", required=True, help="a features zone (LAKE/features) with the days to try")
    parser.add_argument("--windows", default=DEFAULT_WINDOWS,
                        help="the holdouts' last days, comma-separated (default: %(default)s)")
    parser.add_argument("--seeds", default="13,14", help="the MLPs' seeds, comma-separated (default: %(default)s)")
    parser.add_argument("--max-train-days", type=int, default=None,
                        help="the most training days of a window (default: train.max_train_days)")
    parser.add_argument("--config", default=None, help="the pipeline config (default: the bundled one)")
    parser.add_argument("--sweep", action="store_true",
                        help="also the sweep's MLP candidates per learning-rate schedule (constant, cosine)")
    parser.add_argument("--schedules", default="constant,cosine",
                        help="with --sweep: the schedules to try (default: %(default)s)")
    parser.add_argument("--members", default="",
                        help="also the MLP as an ensemble of K nets (hyperparameter members), at train.learning_rate\n"
                             "and train.lr_schedule, seed train.seed: K comma-separated, e.g. 2,4 (mlp_members<K>)")
    parser.add_argument("--mlp-only", action="store_true",
                        help="only the MLPs of --sweep and --members: no logistic regression, XGBoost or seeds")
    parser.add_argument("--out", default="studies/results",
                        help="the folder model_families.json goes to (default: %(default)s)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = load_config(args.config)
    spec, train = config.features, config.train
    max_days = args.max_train_days or train.reach_days
    columns = [*spec.categorical, *spec.model_numeric, spec.label]
    frame = pd.read_parquet(args.features, columns=[*columns, PARTITION])
    frame = frame[frame[spec.label].notna()].reset_index(drop=True)
    frame["day"] = pd.to_datetime(frame[PARTITION].astype(str)).dt.date
    now = {"hidden_units": list(train.hyperparameters["hidden_units"]),
           "dropout": float(train.hyperparameters.get("dropout", 0.0)), "weight_decay": train.weight_decay,
           "epochs": train.epochs, "learning_rate": train.learning_rate, "schedule": train.lr_schedule,
           "hyperparameters": dict(train.hyperparameters)}
    from jobs.metrics import roc_auc
    seeds = [int(s) for s in args.seeds.split(",")]
    ensembles = [int(k) for k in args.members.split(",") if k]
    rows = []
    for text in args.windows.split(","):
        run_date = dt.date.fromisoformat(text)
        training, holdout = window_rows(frame, run_date, train, max_days)
        first_holdout = holdout.day.min() if len(holdout) else run_date
        validation = frame[(frame.day >= first_holdout - dt.timedelta(days=train.validation_days))
                           & (frame.day < first_holdout)]
        pre = fit_preprocessor(training, spec, train.min_category_count, train.clip_to_training_range)
        score = {"window": text, "training_rows": len(training)}
        pooled = score["pooled"] = {}

        def judged(probabilities: Any, holdout: Any = holdout) -> float:
            return round(daily_auc(holdout["day"], holdout[spec.label], probabilities), 4)

        def scored(name: str, probabilities: Any, pooled: dict = pooled, holdout: Any = holdout,
                   score: dict = score) -> None:
            score[name] = judged(probabilities)
            pooled[name] = round(roc_auc(holdout[spec.label].to_numpy(), probabilities), 4)

        if not args.mlp_only:
            linear = fit_linear(pre, training, holdout, spec.label)
            trees = fit_trees(pre, training, holdout, spec.label, config.sweep.xgboost_params()[0])
            scored("logistic_regression", linear)
            scored("xgboost", trees)
            for name, settings in (("mlp_before", BEFORE), ("mlp", now)):
                found = [judged(fit_mlp(pre, training, holdout, spec.label, settings, seed)) for seed in seeds]
                score[name] = round(float(np.mean(found)), 4)
                score[f"{name}_seeds"] = found
        for members in ensembles:
            ensemble = {**now, "hyperparameters": {**now["hyperparameters"], "members": members}}
            scored(f"mlp_members{members}", fit_mlp(pre, training, holdout, spec.label, ensemble, train.seed))
        if args.sweep and len(validation):
            if not args.mlp_only:
                scored("blend", (linear + trees) / 2)
            for schedule in args.schedules.split(","):
                swept = sweep_mlps(pre, training, validation, holdout, spec.label, {**now, "schedule": schedule},
                                   list(config.sweep.learning_rate or [train.learning_rate]), train.seed)
                score[f"mlp_{schedule}_best_epochs"] = swept.pop("epochs")
                for suffix, probabilities in swept.items():
                    scored(f"mlp_{schedule}{suffix}", probabilities)
                if schedule == train.lr_schedule and not args.mlp_only:
                    scored("blend_mlp", (linear + trees + swept[""]) / 3)
                    scored("blend_mlp_mean", (linear + trees + swept["_mean"]) / 3)
        print(json.dumps(score), flush=True)
        rows.append(score)
    families = [] if args.mlp_only else ["logistic_regression", "xgboost", "mlp_before", "mlp"]
    families += [f"mlp_members{k}" for k in ensembles]
    if args.sweep:
        families += [f for f in [*(f"mlp_{s}{x}" for s in ("constant", "cosine") for x in ("", "_best_epoch", "_mean")),
                                 "blend", "blend_mlp", "blend_mlp_mean"] if all(f in r for r in rows)]
    means = {f: round(float(np.mean([r[f] for r in rows])), 4) for f in families}
    print("\n| window | training rows | " + " | ".join(families) + " |\n|---|---|" + "---|" * len(families))
    for r in rows:
        print(f"| {r['window']} | {r['training_rows']:,} | " + " | ".join(str(r[f]) for f in families) + " |")
    print("| mean | | " + " | ".join(str(means[f]) for f in families) + " |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.sweep:
        pooled_means = {f: round(float(np.mean([r["pooled"][f] for r in rows])), 4) for f in rows[0]["pooled"]}
        print("pooled ROC AUC, mean over the windows: " + ", ".join(f"{f} {v}" for f, v in pooled_means.items()))
        means = {**means, "pooled": pooled_means}
    (out / "model_families.json").write_text(json.dumps({"windows": rows, "mean": means, "seeds": seeds,
                                                         "settings": {"mlp": now, "mlp_before": BEFORE}}, indent=2))


if __name__ == "__main__":
    main()
