"""The recent-outcome shift's rule, measured offline over a replayed year.

From one policy's served predictions (``<home>/policies/<policy>/lake/predictions``: the model's own
``model_probability`` and the served ``logit_shift`` per row) and the shared lake's outcomes
(``<home>/lake/features``: ``features.label`` on ``features.id_columns``), each day's probabilities
are served again under other shift rules, every rule reading only days strictly before D whose
outcomes have landed (``monitoring.label_delay_days``), and judged as the monitor judges a day
(log loss, ECE of 10 equal-mass bins, ``level_check``). Days before the first served one (a
shift's first reference days) are scored with the champion's registered version through
``mlflow.pyfunc`` (outside Spark), and checked against the lake's rows on served days.
Run from the repository root in its virtual environment; ``--help`` lists the options.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobs.config import load_config  # noqa: E402
from jobs.metrics import EPS, expected_calibration_error  # noqa: E402
from jobs.monitoring.quality import level_check  # noqa: E402
from jobs.scoring.shift import BIN_WIDTH, EDGE, LIMIT  # noqa: E402

LOOKBACK = 42  # days before the first served day whose rows are scored (the longest rule's reach)


# --------------------------------------------------------------------------- data


def read_zone(path: Path, columns: list[str]) -> pd.DataFrame:
    data = ds.dataset(str(path), format="parquet", partitioning="hive")
    wanted = list(dict.fromkeys(c for c in columns if c in data.schema.names or c == "date"))
    frame = data.to_table(columns=wanted).to_pandas()
    frame["date"] = pd.to_datetime(frame["date"].astype(str)).dt.date
    return frame


def keyed(frame: pd.DataFrame, ids: list[str]) -> pd.DataFrame:
    """Null-safe join keys: each id as a string, a null as its own token."""
    out = frame.copy()
    for c in ids:
        out[f"_k_{c}"] = out[c].astype("string").fillna("<null>")
    return out


def load_rows(home: Path, policy: str, config, model_uri: str | None = None) -> tuple[pd.DataFrame, dict]:
    ids = list(dict.fromkeys(config.features.id_columns))
    label = config.features.label
    preds = read_zone(home / "policies" / policy / "lake" / "predictions",
                      [*ids, "probability", "model_probability", "logit_shift", "model_name", "model_version", "date"])
    versions = preds.groupby(["model_name", "model_version"]).size()
    served = sorted(preds["date"].unique())
    first = served[0]
    features = read_zone(home / "lake" / "features", [*ids, label, *config.features.inputs, "date"])
    features = features[(features["date"] >= first - dt.timedelta(days=LOOKBACK)) & (features["date"] <= served[-1])]
    kp, kf = keyed(preds, ids), keyed(features[[*ids, label, "date"]], ids)
    keys = [f"_k_{c}" for c in ids] + ["date"]
    joined = kp.merge(kf[[*keys, label]], on=keys, how="left", validate="one_to_one")
    info = {"versions": {f"{n} v{v}": int(k) for (n, v), k in versions.items()},
            "served_days": len(served), "first": str(first), "last": str(served[-1]),
            "prediction_rows": int(len(preds)), "unmatched": int(joined[label].isna().sum())}
    rows = pd.DataFrame({"date": joined["date"], "p": joined["model_probability"].astype(float),
                         "served": joined["probability"].astype(float), "shift": joined["logit_shift"].astype(float),
                         "y": joined[label].astype(float), "served_day": True})
    if model_uri:  # another fixed model: every day's features scored by it outside Spark
        import mlflow

        mlflow.set_tracking_uri(f"sqlite:///{home / 'mlflow.db'}")
        model = mlflow.pyfunc.load_model(model_uri)
        info["model_uri"] = model_uri
        p = np.asarray(model.predict(features[config.features.inputs]), dtype=float).ravel()
        served_set = set(served)
        rows = pd.DataFrame({"date": features["date"].to_numpy(), "p": p, "served": np.nan, "shift": np.nan,
                             "y": features[label].astype(float).to_numpy(),
                             "served_day": features["date"].isin(served_set).to_numpy()})
        info["scored_before"] = int((features["date"] < first).sum())
        return rows, info
    # the days before the first served one: scored by the champion's version outside Spark
    before = features[features["date"] < first]
    if len(before):
        import mlflow

        mlflow.set_tracking_uri(f"sqlite:///{home / 'mlflow.db'}")
        (name, version), = versions.index.tolist() if len(versions) == 1 else [versions.idxmax()]
        model = mlflow.pyfunc.load_model(f"models:/{name}/{version}")
        p_before = np.asarray(model.predict(before[config.features.inputs]), dtype=float).ravel()
        # the same version on one served day, against the lake's model_probability
        check_day = served[0]
        day_f = keyed(features[features["date"] == check_day], ids)
        again = np.asarray(model.predict(day_f[config.features.inputs]), dtype=float).ravel()
        day_f = day_f.assign(again=again)
        both = kp[kp["date"] == check_day].merge(day_f[[*keys, "again"]], on=keys)
        info["pyfunc_check"] = {"day": str(check_day), "rows": int(len(both)),
                                "max_abs_diff": float(np.abs(both["again"] - both["model_probability"]).max())}
        rows = pd.concat([pd.DataFrame({"date": before["date"].to_numpy(), "p": p_before, "served": np.nan,
                                        "shift": np.nan, "y": before[label].astype(float).to_numpy(),
                                        "served_day": False}), rows], ignore_index=True)
    info["scored_before"] = int(len(before))
    return rows, info


# --------------------------------------------------------------------------- the shift's pieces


def logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, EDGE, 1 - EDGE)
    return np.log(q / (1 - q))


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def solve(z: np.ndarray, y_rate: float, w: np.ndarray | None = None) -> float:
    """delta with the (weighted) mean of sigmoid(z + delta) equal to ``y_rate``: bisection as
    jobs/scoring/shift.solve_shift, within [-LIMIT, LIMIT]."""
    w = np.ones_like(z) if w is None else w
    total = w.sum()
    low, high = -LIMIT, LIMIT
    for _ in range(60):
        mid = (low + high) / 2
        if (w * sigmoid(z + mid)).sum() / total < y_rate:
            low = mid
        else:
            high = mid
    return (low + high) / 2


class Days:
    """Per calendar day: the labelled rows' logits and labels (the rule's inputs), and the day's own
    solved intercept (what a shift would have had to be on that day)."""

    def __init__(self, rows: pd.DataFrame):
        self.z, self.y, self.own = {}, {}, {}
        self.binned = {}
        for day, g in rows.groupby("date"):
            lab = g[g["y"].notna()]
            z = logit(lab["p"].to_numpy())
            self.z[day], self.y[day] = z, lab["y"].to_numpy()
            if len(z):
                self.own[day] = solve(z, self.y[day].mean())
                # the score job's bins: round(logit / 0.01), Spark's HALF_UP
                b = np.floor(z / BIN_WIDTH + 0.5).astype(np.int64)
                u, inv = np.unique(b, return_inverse=True)
                self.binned[day] = (u * BIN_WIDTH, np.bincount(inv), np.bincount(inv, weights=self.y[day]))

    def landed(self, day: dt.date, k: int, delay: int) -> list[dt.date]:
        last = day - dt.timedelta(days=1 + delay)
        return sorted(d for d in (last - dt.timedelta(days=j) for j in range(k)) if d in self.z and len(self.z[d]))


# --------------------------------------------------------------------------- rules
# each: (days, day, delay, state) -> the logit shift applied to day D's model probabilities


def pooled(days: Days, refs: list[dt.date]) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([days.z[d] for d in refs]), np.concatenate([days.y[d] for d in refs])


def current(k=7, strength=1.0, min_rows=100, binned=True):
    def rule(days: Days, day, delay, state):
        refs = days.landed(day, k, delay)
        if not refs:
            return 0.0
        if binned:
            z = np.concatenate([days.binned[d][0] for d in refs])
            n = np.concatenate([days.binned[d][1] for d in refs]).astype(float)
            pos = np.concatenate([days.binned[d][2] for d in refs])
            if n.sum() < min_rows:
                return 0.0
            return round(strength * solve(z, pos.sum() / n.sum(), n), 4)
        z, y = pooled(days, refs)
        if len(z) < min_rows:
            return 0.0
        return strength * solve(z, y.mean())
    return rule


def none():
    return lambda days, day, delay, state: 0.0


def capped(c, k=7):
    base = current(k, binned=False)
    return lambda days, day, delay, state: float(np.clip(base(days, day, delay, state), -c, c))


def by_rows(k0, k=7):
    """delta * n / (n + k0): the evidence counted in rows."""
    def rule(days, day, delay, state):
        refs = days.landed(day, k, delay)
        if not refs:
            return 0.0
        z, y = pooled(days, refs)
        return len(z) / (len(z) + k0) * solve(z, y.mean())
    return rule


def by_days(tau, k=7):
    """The evidence counted in days: the window's daily intercepts' mean, shrunk towards 0 by a
    normal prior of sd ``tau`` against their day-to-day scatter (var / m)."""
    def rule(days, day, delay, state):
        refs = days.landed(day, k, delay)
        if len(refs) < 2:
            return 0.0
        d = np.array([days.own[r] for r in refs])
        noise = d.var(ddof=1) / len(d)
        return float(d.mean() * tau ** 2 / (tau ** 2 + noise))
    return rule


def exp_weighted(half_life, span=28):
    """One intercept over ``span`` landed days, each day's rows weighted 2**(-age / half_life)."""
    def rule(days, day, delay, state):
        refs = days.landed(day, span, delay)
        if not refs:
            return 0.0
        last = day - dt.timedelta(days=1 + delay)
        z, y, w = [], [], []
        for r in refs:
            age = (last - r).days
            z.append(days.z[r])
            y.append(days.y[r])
            w.append(np.full(len(days.z[r]), 0.5 ** (age / half_life)))
        z, y, w = np.concatenate(z), np.concatenate(y), np.concatenate(w)
        return solve(z, float((w * y).sum() / w.sum()), w)
    return rule


def median_days(k=7):
    def rule(days, day, delay, state):
        refs = days.landed(day, k, delay)
        return float(np.median([days.own[r] for r in refs])) if refs else 0.0
    return rule


def significant_days(k=7, t=2.0):
    """Shift only when the window's daily intercepts' mean is t standard errors from 0 (days as
    the units: a week of storms is 7 observations, not 6,000)."""
    def rule(days, day, delay, state):
        refs = days.landed(day, k, delay)
        if len(refs) < 3:
            return 0.0
        d = np.array([days.own[r] for r in refs])
        se = d.std(ddof=1) / math.sqrt(len(d))
        return float(current(k, binned=False)(days, day, delay, state)) if abs(d.mean()) > t * se else 0.0
    return rule


def wilson_excludes(k=7):
    """Shift only when the pooled realized rate's Wilson 95% interval excludes the model's mean."""
    def rule(days, day, delay, state):
        refs = days.landed(day, k, delay)
        if not refs:
            return 0.0
        z, y = pooled(days, refs)
        n, r, m, zz = len(y), y.mean(), sigmoid(z).mean(), 1.959964
        centre = (r + zz * zz / (2 * n)) / (1 + zz * zz / n)
        half = zz * math.sqrt(r * (1 - r) / n + zz * zz / (4 * n * n)) / (1 + zz * zz / n)
        return solve(z, r) if not (centre - half <= m <= centre + half) else 0.0
    return rule


def learned_strength(k=7, min_days=14, prior=0.5):
    """The current rule's intercept times a strength learned point-in-time: the least-squares slope
    of each landed day's own intercept on the shift the rule would have given it (through 0, in
    [0, 1]), over every landed day before D; ``prior`` until ``min_days`` have landed."""
    base = current(k, binned=False)

    def rule(days, day, delay, state):
        hist = state.setdefault("hist", {})
        last = day - dt.timedelta(days=1 + delay)
        for d in sorted(days.own):
            if d <= last and d not in hist:
                hist[d] = (base(days, d, delay, state), days.own[d])
        pairs = [v for d, v in hist.items() if d <= last and v[0] != 0.0]
        delta = base(days, day, delay, state)
        if len(pairs) < min_days:
            return prior * delta
        x, o = np.array(pairs).T
        s = float(np.clip((x * o).sum() / (x * x).sum(), 0.0, 1.0))
        state["strength"] = s
        return s * delta
    return rule


def agreeing(k=7, base=None):
    """The 7-day intercept (or ``base``'s) only as far as yesterday's own agrees with it (same sign:
    the smaller in size; else 0)."""
    base = base or current(k, binned=False)

    def rule(days, day, delay, state):
        refs = days.landed(day, 1, delay)
        delta = base(days, day, delay, state)
        if not refs:
            return delta
        y1 = days.own[refs[-1]]
        return 0.0 if y1 * delta <= 0 else math.copysign(min(abs(y1), abs(delta)), delta)
    return rule


def combo(c, strength, k=7):
    base = current(k, binned=False)
    return lambda days, day, delay, state: float(np.clip(strength * base(days, day, delay, state), -c, c))


RULES = {
    "none": none(),
    "current (7 d, strength 1)": current(),
    "strength 0.5": current(strength=0.5, binned=False),
    "strength 0.75": current(strength=0.75, binned=False),
    "3 days": current(k=3, binned=False),
    "14 days": current(k=14, binned=False),
    "28 days": current(k=28, binned=False),
    "rows n/(n+5000)": by_rows(5000),
    "days prior sd 0.3": by_days(0.3),
    "days prior sd 0.5": by_days(0.5),
    "cap 0.25": capped(0.25),
    "cap 0.5": capped(0.5),
    "cap 0.75": capped(0.75),
    "cap 1.0": capped(1.0),
    "strength 0.5, cap 0.5": combo(0.5, 0.5),
    "EW half-life 2 d (28 d)": exp_weighted(2),
    "EW half-life 4 d (28 d)": exp_weighted(4),
    "EW half-life 7 d (28 d)": exp_weighted(7),
    "EW half-life 4 d (14 d)": exp_weighted(4, span=14),
    "median of 7 daily": median_days(),
    "7 d if |mean| > 2 se (days)": significant_days(),
    "7 d if Wilson excludes": wilson_excludes(),
    "learned strength": learned_strength(),
    "yesterday agrees": agreeing(),
    "EW 4 d (28 d), yesterday agrees": agreeing(base=exp_weighted(4)),
}


# --------------------------------------------------------------------------- judging


def log_loss(p, y):
    q = np.clip(p, EPS, 1 - EPS)
    return float(-(y * np.log(q) + (1 - y) * np.log(1 - q)).mean())


def judge(rows: pd.DataFrame, days: Days, shifts: dict, max_gap: float) -> tuple[dict, pd.DataFrame]:
    served = rows[rows["served_day"] & rows["y"].notna()]
    per_day = []
    p_all, y_all = [], []
    for day, g in served.groupby("date"):
        p_own, y = g["p"].to_numpy(), g["y"].to_numpy()
        s = shifts[day]
        p = p_own if s == 0 else sigmoid(logit(p_own) + s)
        level = level_check(y, p, p_own, max_gap)
        per_day.append({"date": day, "rows": len(y), "shift": s, "log_loss": log_loss(p, y),
                        "ece": expected_calibration_error(y, p), "served_rate": p.mean(), "realized": y.mean(),
                        "own_rate": p_own.mean(), "flagged": bool(level["flagged"]),
                        "loss_sum": -np.sum(y * np.log(np.clip(p, EPS, 1 - EPS))
                                            + (1 - y) * np.log(1 - np.clip(p, EPS, 1 - EPS)))})
        p_all.append(p)
        y_all.append(y)
    frame = pd.DataFrame(per_day).set_index("date")
    full = pd.Series(index=pd.date_range(frame.index.min(), frame.index.max()).date, dtype=float)
    loss = frame["loss_sum"].reindex(full.index).fillna(0).rolling(7).sum()
    n = frame["rows"].reindex(full.index).fillna(0).rolling(7).sum()
    week = (loss / n).dropna()
    ratio = frame["served_rate"] / frame["realized"]
    summary = {
        "mean_daily_log_loss": frame["log_loss"].mean(),
        "worst_7d_log_loss": float(week.max()), "worst_7d_end": str(week.idxmax()),
        "mean_daily_ece": frame["ece"].mean(),
        "pooled_log_loss": log_loss(np.concatenate(p_all), np.concatenate(y_all)),
        "flagged_days": int(frame["flagged"].sum()),
        "worst_ratio": float(ratio.max()), "worst_ratio_day": str(ratio.idxmax()),
        "lowest_ratio": float(ratio.min()),
        "days_over_2x": int((ratio > 2).sum()),
        "over_2x_by_shift": int(((ratio > 2) & (frame["own_rate"] <= 2 * frame["realized"])).sum()),
        "days_under_half": int((ratio < 0.5).sum()),
        "mean_abs_shift": float(frame["shift"].abs().mean()),
    }
    return summary, frame


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, required=True, help="the replay's home (python -m orchestration.replay)")
    ap.add_argument("--policy", default="never",
                    help="the policy whose served predictions are read (default: %(default)s)")
    ap.add_argument("--out", type=Path, required=True, help="the folder the figures and plots go to")
    ap.add_argument("--config", default=None,
                    help="the pipeline's config (default: the one load_config() finds without it)")
    ap.add_argument("--model-uri", default=None, help="score every day with this model instead of the lake's rows")
    args = ap.parse_args()
    started = time.time()
    config = load_config(args.config) if args.config else load_config()
    delay = config.monitoring.label_delay_days
    max_gap = config.monitoring.max_rate_gap
    spec = config.score.recent_shift
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.out / "rows.parquet"
    if cache.exists():
        rows = pd.read_parquet(cache)
        rows["date"] = pd.to_datetime(rows["date"]).dt.date
        info = json.loads((args.out / "rows.json").read_text())
    else:
        rows, info = load_rows(args.home, args.policy, config, args.model_uri)
        rows.assign(date=pd.to_datetime(rows["date"])).to_parquet(cache)
        (args.out / "rows.json").write_text(json.dumps(info, indent=1))
    info.update(label_delay_days=delay, max_rate_gap=max_gap, shipped={"days": spec.days, "strength": spec.strength,
                                                                       "min_rows": spec.min_rows})
    print(json.dumps(info, indent=1))
    days = Days(rows)
    served_days = sorted(rows.loc[rows["served_day"], "date"].unique())

    # the shipped rule against the lake's logit_shift
    if not args.model_uri:
        lake_shift = rows[rows["served_day"]].groupby("date")["shift"].first()
        ours = current(spec.days, spec.strength, spec.min_rows)
        diffs = pd.Series({d: ours(days, d, delay, {}) - lake_shift[d] for d in served_days})
        info["reproduction"] = {"days": len(diffs), "max_abs_diff": float(diffs.abs().max()),
                                "worst_day": str(diffs.abs().idxmax()),
                                "days_over_1e-3": int((diffs.abs() > 1e-3).sum())}
        print("reproduction of logit_shift:", info["reproduction"])

    results, frames = {}, {}
    for name, rule in RULES.items():
        state: dict = {}
        shifts = {d: float(rule(days, d, delay, state)) for d in served_days}
        results[name], frames[name] = judge(rows, days, shifts, max_gap)
        if "strength" in state:
            results[name]["final_learned_strength"] = state["strength"]
        print(f"{name:32s} " + " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                                        for k, v in results[name].items()), flush=True)
    # each rule's daily log loss against the current rule's, paired by day
    ref = frames["current (7 d, strength 1)"]["log_loss"]
    for name, f in frames.items():
        diff = f["log_loss"] - ref
        results[name]["vs_current_mean"] = float(diff.mean())
        results[name]["vs_current_se"] = float(diff.std(ddof=1) / math.sqrt(len(diff)))
        results[name]["days_better_than_current"] = int((diff < 0).sum())
    # the days before the first served one that have earlier days to match (the first window's
    # holdout, the demo's day among them): what each rule would serve there
    early = {}
    first = served_days[0]
    for day in sorted(d for d in days.z if first - dt.timedelta(days=7) <= d < first and len(days.z[d])):
        z, y = days.z[day], days.y[day]
        entry = {"realized": float(y.mean()), "own": float(sigmoid(z).mean()), "rows": int(len(y)),
                 "ref_rate_7d": float(np.concatenate([days.y[r] for r in days.landed(day, 7, delay)]).mean())}
        for name, rule in RULES.items():
            entry[name] = float(sigmoid(z + rule(days, day, delay, {})).mean())
        early[str(day)] = entry
    # the days like the demo's: the current rule serving more than twice the realized rate
    cur = frames["current (7 d, strength 1)"]
    like = cur[cur["served_rate"] > 2 * cur["realized"]].index
    demo = []
    for d in like:
        entry = {"date": str(d), "rows": int(cur.loc[d, "rows"]), "realized": cur.loc[d, "realized"],
                 "own": cur.loc[d, "own_rate"],
                 "ref_rate_7d": float(np.concatenate([days.y[r] for r in days.landed(d, 7, delay)]).mean())}
        for name, f in frames.items():
            entry[name] = f.loc[d, "served_rate"]
            entry[f"{name} |flag"] = bool(f.loc[d, "flagged"])
        demo.append(entry)
    # the month by month gain over none
    months = {}
    base = frames["none"]
    for name, f in frames.items():
        month = pd.to_datetime(pd.Series(f.index, index=f.index)).dt.month
        m = (f["log_loss"] - base["log_loss"]).groupby(month).mean()
        months[name] = {int(k): round(float(v), 4) for k, v in m.items()}
    out = {"info": info, "results": results, "demo_like": demo, "before_first_served": early,
           "monthly_gain_vs_none": months, "seconds": round(time.time() - started, 1)}
    (args.out / "shift_rules.json").write_text(json.dumps(out, indent=1, default=str))
    pd.concat({k: v for k, v in frames.items()}, names=["rule"]).to_csv(args.out / "per_day.csv")
    print(json.dumps(demo, indent=1, default=str))
    print(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
