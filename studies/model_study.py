"""Study: which features, window lengths and model families move the daily realized ROC AUC.

``python -m studies.model_study --help`` lists its options.

A quick pass: ``--step 56`` (6 weeks, about 10 minutes on a busy 2-core machine); the full pass at
``--step 14`` (23 weeks, every contender) about 40.

The replay's measure, offline and in one process (no Spark, no MLflow): served weeks start at
``--first`` and every ``--step`` days after it while the week ends by ``--last``; for each, every
contender is trained on the days before the week (``--train-days`` of them, fewer where the lake
starts later: the expanding window), scores the week's 7 days with that one model, and each day's
ROC AUC and log loss are measured on its labelled rows (cancelled flights, with a null label, are
dropped). A contender's headline is the replay's: the mean of the daily ROC AUCs weighted by each
day's labelled rows, over all served days; beside it the plain day mean, the worst week's pooled
log loss, and the share of weeks it beats logistic regression.

Contenders (``--contenders`` picks some, and a blend's members with it; all by default):

- ``lr``, ``xgb``, ``mlp``: logistic regression (scikit-learn, Newton-Cholesky: z-scored numbers
  with mean imputation and missing flags, one-hot categories), XGBoost (hist, depth 4, early
  stopping on the window's last 3 days by their pooled ROC AUC) and the pipeline's own MLP
  (``jobs.model.tabular.build_net`` with ``train.hyperparameters``, AdamW, ``train.epochs``) on the
  pipeline's features (``features.inputs``);
- ``lr_nohist``, ``xgb_nohist``: the same without the ``hist_*`` columns (what label history gives);
- ``lr_sched``, ``xgb_sched``: plus the schedule features of :func:`schedule_features`
  (:data:`SCHEDULE_COLUMNS`: block time, congestion), from day D's own scheduled times only;
- ``lr_sched_tail``, ``xgb_sched_tail``: plus the tail rotation (:data:`TAIL_COLUMNS`: leg number,
  turnaround). Suspect: the recorded tail number is the aircraft that flew, and a swap on the day
  shows as an impossible rotation (a scheduled turnaround under zero minutes: 73% of those flights
  arrive late, against 24% of all), so these read what happened on the day;
- ``lr_flight``, ``xgb_flight``, ``mlp_flight``: the schedule features plus the flight number's own
  history of :func:`flight_history` (:data:`FLIGHT_COLUMNS`, from days before D only);
  ``xgb_flight_fixed``: :data:`FIXED_TREES` trees on the whole window, no early stopping;
- ``blend_flight``: the mean of ``lr_flight``'s and ``xgb_flight_fixed``'s probabilities;
- ``lr_noweather``, ``xgb_noweather``: without the weather columns (:data:`WEATHER_COLUMNS`, the
  hour's observations at the origin, which the night before knows only as a forecast);
- ``xgb_rank_flight``: ``xgb_flight``'s columns, a pairwise ranking objective within each day (the
  measure ranks one day's flights); scores, not probabilities: no log loss;
- ``xgb_<N>d``: ``xgb`` on a window of N days for each N of ``--xgb-windows``; for the longest also
  ``xgb_flight_<N>d``, ``lr_flight_<N>d``, ``xgb_flight_fixed_<N>d`` and ``blend_flight_<N>d``.

Everything runs on one thread (``n_jobs=1``, ``torch.set_num_threads(1)``); the year is read once
(``LAKE/features`` for the feature rows, ``LAKE/validated/flights`` and ``airports`` for the
schedule). Writes ``study.json`` (per contender: the summary, the per-week, per-month and
per-weekday-offset figures, seconds) and ``study.md`` to ``--out``, and prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.lake.layout import PARTITION

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

WEEK_DAYS = 7
VALIDATION_DAYS = 3  # XGBoost's early stopping: the window's last days
FLIGHT_KEY = [PARTITION, "carrier", "flight", "origin", "sched_dep_time"]  # one row per flight and day
# The few destinations the airports table lacks (Puerto Rico, the Virgin Islands), on Atlantic time.
EXTRA_ZONES = {"BQN": "America/Puerto_Rico", "PSE": "America/Puerto_Rico", "SJU": "America/Puerto_Rico",
               "STT": "America/St_Thomas"}
ORIGIN_ZONE = "America/New_York"  # every flight of the data leaves New York
# From the recorded tail numbers: suspect, the recorded tail is the aircraft that flew (see the docstring).
TAIL_COLUMNS = ["sched_tail_leg", "sched_tail_legs", "sched_tail_legs_left", "sched_tail_gap_min",
                "sched_tail_slack_min", "sched_tail_since_first_min", "sched_tail_prev_block_min"]
SCHEDULE_COLUMNS = ["sched_block_min", "sched_block_pad_min", "sched_origin_hour_deps", "sched_origin_3h_deps",
                    "sched_nyc_hour_deps", "sched_origin_day_deps", "sched_carrier_origin_hour_deps",
                    "sched_dest_arr_hour", "sched_route_day_flights", "sched_carrier_day_flights",
                    "sched_day_flights"]
FLIGHT_WINDOWS = (7, 28)  # trailing days of a flight number's own history
FLIGHT_PRIOR_ROWS = 5.0  # smoothing of its late rate towards all flights' rate of the same days
FLIGHT_COLUMNS = [*(f"fn_{w}d_{k}" for w in FLIGHT_WINDOWS for k in ("rate", "log_rows", "delay")),
                  "fn_28d_tail_leg", "fn_28d_tail_slack_min"]
# The builder's weather columns: the hour's observations at the origin, not a forecast made the night before.
WEATHER_COLUMNS = ["temp", "dewp", "humid", "wind_dir", "wind_speed", "precip", "pressure", "visib"]
FIXED_TREES = 300
XGB_PARAMS = {"n_estimators": 800, "max_depth": 4, "learning_rate": 0.05, "subsample": 0.8,
              "colsample_bytree": 0.8, "min_child_weight": 50, "early_stopping_rounds": 50}


# The paired comparisons the report makes: (what changes, the contender with it, the one without).
CONTRASTS = [
    ("history features (lr)", "lr", "lr_nohist"), ("history features (xgb)", "xgb", "xgb_nohist"),
    ("schedule features (lr)", "lr_sched", "lr"), ("schedule features (xgb)", "xgb_sched", "xgb"),
    ("tail rotation, suspect (lr)", "lr_sched_tail", "lr_sched"),
    ("tail rotation, suspect (xgb)", "xgb_sched_tail", "xgb_sched"),
    ("flight-number history (lr)", "lr_flight", "lr_sched"), ("flight-number history (xgb)", "xgb_flight", "xgb_sched"),
    ("flight-number history (mlp, with schedule)", "mlp_flight", "mlp"),
    ("schedule + flight-number history (lr)", "lr_flight", "lr"),
    ("schedule + flight-number history (xgb)", "xgb_flight", "xgb"),
    ("window 18 vs 90 days (xgb)", "xgb_18d", "xgb"), ("window 45 vs 90 days (xgb)", "xgb_45d", "xgb"),
    ("window 180 vs 90 days (xgb)", "xgb_180d", "xgb"),
    ("window 180 vs 90 days (xgb_flight)", "xgb_flight_180d", "xgb_flight"),
    ("window 180 vs 90 days (lr_flight)", "lr_flight_180d", "lr_flight"),
    ("window 180 vs 90 days (xgb_flight_fixed)", "xgb_flight_fixed_180d", "xgb_flight_fixed"),
    ("window 180 vs 90 days (blend_flight)", "blend_flight_180d", "blend_flight"),
    ("fixed trees on the whole window vs early stopping", "xgb_flight_fixed", "xgb_flight"),
    ("pairwise ranking within the day vs log loss", "xgb_rank_flight", "xgb_flight"),
    ("the hour's observed weather (lr)", "lr", "lr_noweather"),
    ("the hour's observed weather (xgb)", "xgb", "xgb_noweather"),
    ("family: xgb vs lr", "xgb", "lr"), ("family: mlp vs lr", "mlp", "lr"),
    ("family: xgb vs lr (with schedule + flight history)", "xgb_flight_fixed", "lr_flight"),
    ("family: mlp vs lr (with schedule + flight history)", "mlp_flight", "lr_flight"),
    ("blend of lr_flight and xgb_flight_fixed vs xgb_flight_fixed", "blend_flight", "xgb_flight_fixed"),
    ("blend_flight vs today's lr", "blend_flight", "lr"),
    ("blend_flight_180d vs today's lr", "blend_flight_180d", "lr"),
]


@dataclass(frozen=True)
class StudyArgs:
    """The CLI contract."""

    lake: Path | None  # None with --render
    first: dt.date
    last: dt.date
    step: int
    train_days: int
    xgb_windows: tuple[int, ...]
    contenders: tuple[str, ...] | None
    config: str | None
    out: Path
    render: bool
    add: bool


@dataclass(frozen=True)
class Contender:
    """One model family on one set of columns over one window length."""

    name: str
    family: str  # lr, xgb, xgb_rank, mlp, or blend (the mean of its members' probabilities)
    history: bool  # the hist_* columns
    extra: tuple[str, ...]  # columns added to the pipeline's
    window: int  # training days before the served week
    what: str
    trees: int = 0  # xgb: 0 = early stopping on the window's last days, N = N trees on the whole window
    drop: tuple[str, ...] = ()  # the pipeline's columns left out
    members: tuple[str, ...] = ()  # blend: contenders run before it
    hyper: tuple[tuple[str, Any], ...] = ()  # mlp: hyperparameters over the config's
    clip: bool = False  # served numbers clipped to the window's range (train.clip_to_training_range)


def parse_args(argv: list[str] | None = None) -> StudyArgs:
    parser = argparse.ArgumentParser(prog="python -m studies.model_study", description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--lake", type=Path, help="a lake with features/ and validated/ for the year")
    parser.add_argument("--first", default="2013-02-01",
                        help="the first served week's first day (default: %(default)s)")
    parser.add_argument("--last", default="2013-12-24", help="no served day after this one (default: %(default)s)")
    parser.add_argument("--step", type=int, default=14,
                        help="days between served weeks' first days (56: 6 weeks; default: %(default)s)")
    parser.add_argument("--train-days", type=int, default=90, help="the training window of every contender "
                        "without a window in its name (default: %(default)s)")
    parser.add_argument("--xgb-windows", default="18,45,180",
                        help="other windows for xgb, comma-separated (default: %(default)s)")
    parser.add_argument("--contenders", default=None, help="names, comma-separated (default: all)")
    parser.add_argument("--config", default=None, help="the pipeline config (default: the bundled one)")
    parser.add_argument("--out", type=Path, default=Path("docs/bench/model-study"),
                        help="the folder of study.json and study.md (default: %(default)s)")
    parser.add_argument("--render", action="store_true", help="no training: the report again from --out's study.json")
    parser.add_argument("--add", action="store_true", help="run --contenders on the served weeks of --out's "
                        "study.json (its windows too) and add them to it")
    a = parser.parse_args(argv)
    if a.add and not a.contenders:
        parser.error("--add needs --contenders")
    if a.lake is None and not a.render:
        parser.error("--lake is required (unless --render)")
    windows = tuple(int(w) for w in a.xgb_windows.split(",") if w.strip())
    if a.step < 1 or a.train_days <= VALIDATION_DAYS or any(w <= VALIDATION_DAYS for w in windows):
        parser.error(f"--step must be >= 1 and every window > {VALIDATION_DAYS} days")
    chosen = tuple(c.strip() for c in a.contenders.split(",")) if a.contenders else None
    return StudyArgs(a.lake, dt.date.fromisoformat(a.first), dt.date.fromisoformat(a.last), a.step, a.train_days,
                     windows, chosen, a.config, a.out, a.render, a.add)


def contenders(train_days: int, xgb_windows: tuple[int, ...]) -> list[Contender]:
    """Every contender of the study, in the order of the table."""
    sched, tail, flight = tuple(SCHEDULE_COLUMNS), tuple(TAIL_COLUMNS), tuple(FLIGHT_COLUMNS)
    found = [
        Contender("lr", "lr", True, (), train_days, "logistic regression, the pipeline's features"),
        Contender("lr_nohist", "lr", False, (), train_days, "logistic regression without hist_*"),
        Contender("lr_sched", "lr", True, sched, train_days, "lr + schedule (block, congestion)"),
        Contender("lr_sched_tail", "lr", True, sched + tail, train_days,
                  "lr + schedule + tail rotation (suspect: recorded tails)"),
        Contender("lr_flight", "lr", True, sched + flight, train_days, "lr + schedule + flight-number history"),
        Contender("xgb", "xgb", True, (), train_days, "XGBoost, the pipeline's features"),
        Contender("xgb_nohist", "xgb", False, (), train_days, "XGBoost without hist_*"),
        Contender("xgb_sched", "xgb", True, sched, train_days, "xgb + schedule (block, congestion)"),
        Contender("xgb_sched_tail", "xgb", True, sched + tail, train_days,
                  "xgb + schedule + tail rotation (suspect: recorded tails)"),
        Contender("xgb_flight", "xgb", True, sched + flight, train_days, "xgb + schedule + flight-number history"),
        Contender("xgb_flight_fixed", "xgb", True, sched + flight, train_days,
                  f"xgb_flight, {FIXED_TREES} trees on the whole window (no early stopping)", trees=FIXED_TREES),
        Contender("xgb_rank_flight", "xgb_rank", True, sched + flight, train_days,
                  "xgb_flight's columns, pairwise ranking within each day"),
        Contender("lr_noweather", "lr", True, (), train_days, "lr without the weather columns",
                  drop=tuple(WEATHER_COLUMNS)),
        Contender("xgb_noweather", "xgb", True, (), train_days, "xgb without the weather columns",
                  drop=tuple(WEATHER_COLUMNS)),
        Contender("mlp", "mlp", True, (), train_days, "the pipeline's MLP, the pipeline's features"),
        Contender("mlp_flight", "mlp", True, sched + flight, train_days, "mlp + schedule + flight-number history"),
        Contender("blend_flight", "blend", True, sched + flight, train_days,
                  "mean of lr_flight's and xgb_flight_fixed's probabilities",
                  members=("lr_flight", "xgb_flight_fixed")),
    ]
    # day_of_year is a time index within a window of one year: a linear model extrapolates its trend
    doy = ("day_of_year",)
    found += [
        Contender("mlp_flight_wide", "mlp", True, sched + flight, train_days,
                  "mlp_flight with a linear term of its inputs beside the hidden layers (wide and deep)",
                  hyper=(("wide", True),)),
        Contender("lr_flight_nodoy", "lr", True, sched + flight, train_days, "lr_flight without day_of_year",
                  drop=doy),
        Contender("xgb_flight_fixed_nodoy", "xgb", True, sched + flight, train_days,
                  "xgb_flight_fixed without day_of_year", trees=FIXED_TREES, drop=doy),
        Contender("blend_flight_nodoy", "blend", True, sched + flight, train_days,
                  "mean of lr_flight_nodoy's and xgb_flight_fixed_nodoy's probabilities",
                  members=("lr_flight_nodoy", "xgb_flight_fixed_nodoy")),
    ]
    found += [Contender(f"xgb_{w}d", "xgb", True, (), w, f"XGBoost, the pipeline's features, {w}-day window")
              for w in xgb_windows if w != train_days]
    if xgb_windows and max(xgb_windows) != train_days:
        w = max(xgb_windows)
        found += [
            Contender(f"xgb_flight_{w}d", "xgb", True, sched + flight, w, f"xgb_flight, {w}-day window"),
            Contender(f"lr_flight_{w}d", "lr", True, sched + flight, w, f"lr_flight, {w}-day window"),
            Contender(f"xgb_flight_fixed_{w}d", "xgb", True, sched + flight, w, f"xgb_flight_fixed, {w}-day window",
                      trees=FIXED_TREES),
            Contender(f"blend_flight_{w}d", "blend", True, sched + flight, w,
                      f"mean of lr_flight_{w}d's and xgb_flight_fixed_{w}d's probabilities",
                      members=(f"lr_flight_{w}d", f"xgb_flight_fixed_{w}d")),
        ]
        # the pipeline's defaults since: the longest window, no day_of_year, the MLP wide and deep;
        # with and without its numbers clipped to the window's range (trees: the same either way)
        wide = (("wide", True),)
        found += [
            Contender(f"lr_flight_{w}d_nodoy", "lr", True, sched + flight, w, f"lr_flight_{w}d without day_of_year",
                      drop=doy),
            Contender(f"lr_flight_{w}d_nodoy_clip", "lr", True, sched + flight, w,
                      f"lr_flight_{w}d_nodoy, served numbers clipped to the window's range", drop=doy, clip=True),
            Contender(f"mlp_flight_wide_{w}d_nodoy", "mlp", True, sched + flight, w,
                      f"mlp_flight_wide, {w}-day window, without day_of_year", drop=doy, hyper=wide),
            Contender(f"mlp_flight_wide_{w}d_nodoy_clip", "mlp", True, sched + flight, w,
                      f"mlp_flight_wide_{w}d_nodoy, served numbers clipped to the window's range", drop=doy,
                      hyper=wide, clip=True),
            Contender(f"xgb_flight_fixed_{w}d_nodoy", "xgb", True, sched + flight, w,
                      f"xgb_flight_fixed_{w}d without day_of_year", trees=FIXED_TREES, drop=doy),
            Contender(f"blend_flight_{w}d_nodoy", "blend", True, sched + flight, w,
                      f"mean of lr_flight_{w}d_nodoy's and xgb_flight_fixed_{w}d_nodoy's probabilities",
                      members=(f"lr_flight_{w}d_nodoy", f"xgb_flight_fixed_{w}d_nodoy")),
            Contender(f"blend_flight_{w}d_nodoy_clip", "blend", True, sched + flight, w,
                      f"mean of lr_flight_{w}d_nodoy_clip's and xgb_flight_fixed_{w}d_nodoy's probabilities",
                      members=(f"lr_flight_{w}d_nodoy_clip", f"xgb_flight_fixed_{w}d_nodoy")),
        ]
    return found


def clock_minutes(hhmm: pd.Series) -> pd.Series:
    """Minutes after midnight of an HHMM clock time (2400 is 1440)."""
    values = hhmm.astype("float64")
    return (values // 100) * 60 + values % 100


def zone_offsets(pairs: pd.DataFrame, zones: dict[str, str]) -> pd.Series:
    """Minutes the destination's clock is ahead of New York's at noon of the day, per (dest, date) row
    of ``pairs`` (an unknown zone counts as New York's)."""
    from zoneinfo import ZoneInfo

    import pandas as pd

    origin = ZoneInfo(ORIGIN_ZONE)
    cache: dict[str, Any] = {}
    out = []
    for dest, day in zip(pairs["dest"], pairs[PARTITION], strict=True):
        name = zones.get(dest, ORIGIN_ZONE)
        zone = cache.setdefault(name, ZoneInfo(name))
        noon = dt.datetime.fromisoformat(str(day)).replace(hour=12)
        ahead = noon.replace(tzinfo=zone).utcoffset() - noon.replace(tzinfo=origin).utcoffset()
        out.append(ahead.total_seconds() / 60)
    return pd.Series(out, index=pairs.index, dtype="float64")


def schedule_features(flights: pd.DataFrame, zones: dict[str, str]) -> pd.DataFrame:
    """Per flight (:data:`FLIGHT_KEY`), what day D's schedule says about it: the columns of
    :data:`SCHEDULE_COLUMNS`.

    Only scheduled times are read (``sched_dep_time``, ``sched_arr_time``), of every flight of the
    day, cancelled or not (the schedule was known the night before), never a departure, arrival or
    delay. Times are minutes of New York's clock: an arrival's local clock is moved by its
    destination's offset that day. Tail rotation (the data holds only New York's departures, so a
    tail's legs here are its departures from New York): the leg's number and the legs of the day,
    the minutes from the previous leg's scheduled arrival out there to this departure (``gap``,
    null for a first leg) and that less the previous leg's block time, the return flight's estimate
    (``slack``), the minutes since the tail's first departure. Congestion: scheduled departures from
    the same origin in the hour, in the hours either side too, from all three airports in the hour,
    from the origin that day, of the carrier at the origin in the hour; scheduled arrivals at the
    destination in the arrival's local hour; the route's and the carrier's flights and all flights of
    the day. Block: the scheduled block minutes and their excess over the route's median that day.
    """
    import numpy as np
    import pandas as pd

    f = flights[[*FLIGHT_KEY, "dest", "tailnum", "sched_arr_time"]].copy()
    f[PARTITION] = f[PARTITION].astype(str)
    pairs = f[["dest", PARTITION]].drop_duplicates()
    pairs["offset"] = zone_offsets(pairs, zones)
    f = f.merge(pairs, on=["dest", PARTITION], how="left")
    dep = clock_minutes(f["sched_dep_time"])
    arr_local = clock_minutes(f["sched_arr_time"])
    block = (arr_local - f["offset"] - dep) % 1440
    f["dep"], f["block"], f["arr"] = dep, block, dep + block
    f["hour"] = (dep // 60).astype("int64")
    f["arr_hour"] = (arr_local // 60 % 24).astype("int64")

    def count(keys: list[str]) -> pd.Series:
        return f.groupby(keys, sort=False)["dep"].transform("size").astype("float64")

    out = f[FLIGHT_KEY].copy()
    out["sched_block_min"] = block
    route_median = f.groupby([PARTITION, "origin", "dest"], sort=False)["block"].transform("median")
    out["sched_block_pad_min"] = block - route_median
    out["sched_origin_hour_deps"] = count([PARTITION, "origin", "hour"])
    per_hour = f.groupby([PARTITION, "origin", "hour"]).size()
    around = sum(per_hour.reindex(pd.MultiIndex.from_arrays([f[PARTITION], f["origin"], f["hour"] + d]))
                 .fillna(0).to_numpy() for d in (-1, 0, 1))
    out["sched_origin_3h_deps"] = np.asarray(around, dtype="float64")
    out["sched_nyc_hour_deps"] = count([PARTITION, "hour"])
    out["sched_origin_day_deps"] = count([PARTITION, "origin"])
    out["sched_carrier_origin_hour_deps"] = count([PARTITION, "carrier", "origin", "hour"])
    out["sched_dest_arr_hour"] = count([PARTITION, "dest", "arr_hour"])
    out["sched_route_day_flights"] = count([PARTITION, "origin", "dest"])
    out["sched_carrier_day_flights"] = count([PARTITION, "carrier"])
    out["sched_day_flights"] = count([PARTITION])

    tails = f[f["tailnum"].notna()].sort_values([PARTITION, "tailnum", "dep"], kind="stable")
    by_tail = tails.groupby([PARTITION, "tailnum"], sort=False)
    rotation = pd.DataFrame(index=tails.index)
    rotation["sched_tail_leg"] = by_tail.cumcount().astype("float64") + 1
    rotation["sched_tail_legs"] = by_tail["dep"].transform("size").astype("float64")
    rotation["sched_tail_legs_left"] = rotation["sched_tail_legs"] - rotation["sched_tail_leg"]
    previous_arrival, previous_block = by_tail["arr"].shift(1), by_tail["block"].shift(1)
    rotation["sched_tail_gap_min"] = tails["dep"] - previous_arrival
    rotation["sched_tail_slack_min"] = rotation["sched_tail_gap_min"] - previous_block
    rotation["sched_tail_since_first_min"] = tails["dep"] - by_tail["dep"].transform("min")
    rotation["sched_tail_prev_block_min"] = previous_block
    out = out.join(rotation)  # rows without a tail number keep nulls
    return out


def trailing_sums(keys: np.ndarray, days: np.ndarray, values: np.ndarray, window: int) -> np.ndarray:
    """Per (key, day) row: the sum of ``values`` of the same key over the ``window`` days before the
    row's day (the day itself left out). Keys and days are small non-negative integers."""
    import numpy as np

    table = np.zeros((keys.max() + 1, days.max() + 2))
    np.add.at(table, (keys, days + 1), values)
    before = np.cumsum(table, axis=1)  # before[k, d]: the sum over the days < d
    return before[keys, days] - before[keys, np.maximum(days - window, 0)]


def flight_history(flights: pd.DataFrame, schedule: pd.DataFrame) -> pd.DataFrame:
    """Per flight (:data:`FLIGHT_KEY`), its flight number's own past (the carrier, number and origin):
    over each of :data:`FLIGHT_WINDOWS` trailing days before D, the late rate (smoothed towards all
    flights' rate of those days with :data:`FLIGHT_PRIOR_ROWS`), log1p of the labelled rows and the
    mean arrival delay clipped to [-60, 180] minutes; over 28 days, the mean tail leg and the mean
    tail slack (clipped to [-120, 300]) its recorded tails had. Only days before D are read: outcomes
    of D-1 have landed when D is scored (``monitoring.label_delay_days`` 0)."""
    import numpy as np
    import pandas as pd

    f = flights[[*FLIGHT_KEY, "arr_delay"]].merge(
        schedule[[*FLIGHT_KEY, "sched_tail_leg", "sched_tail_slack_min"]], on=FLIGHT_KEY, how="left")
    day = pd.to_datetime(f[PARTITION].astype(str))
    days = ((day - day.min()).dt.days).to_numpy()
    keys = pd.factorize(f["carrier"].astype(str) + "/" + f["flight"].astype(str) + "/" + f["origin"].astype(str))[0]
    everyone = np.zeros_like(keys)
    known = f["arr_delay"].notna().to_numpy()
    late = (f["arr_delay"] > 15).to_numpy(dtype="float64")
    delay = f["arr_delay"].clip(-60, 180).fillna(0).to_numpy()
    out = f[FLIGHT_KEY].copy()
    for w in FLIGHT_WINDOWS:
        rows = trailing_sums(keys, days, known.astype("float64"), w)
        lates = trailing_sums(keys, days, late * known, w)
        all_rows = trailing_sums(everyone, days, known.astype("float64"), w)
        prior = np.divide(trailing_sums(everyone, days, late * known, w), all_rows,
                          out=np.full(len(f), 0.2), where=all_rows > 0)
        out[f"fn_{w}d_rate"] = (lates + FLIGHT_PRIOR_ROWS * prior) / (rows + FLIGHT_PRIOR_ROWS)
        out[f"fn_{w}d_log_rows"] = np.log1p(rows)
        out[f"fn_{w}d_delay"] = np.divide(trailing_sums(keys, days, delay * known, w), rows,
                                          out=np.full(len(f), np.nan), where=rows > 0)
    for column, name, low, high in (("sched_tail_leg", "fn_28d_tail_leg", 1, 9),
                                    ("sched_tail_slack_min", "fn_28d_tail_slack_min", -120, 300)):
        present = f[column].notna().to_numpy()
        values = f[column].clip(low, high).fillna(0).to_numpy()
        count = trailing_sums(keys, days, present.astype("float64"), 28)
        out[name] = np.divide(trailing_sums(keys, days, values, 28), count, out=np.full(len(f), np.nan),
                              where=count > 0)
    return out


def load_year(lake: Path, spec: Any) -> pd.DataFrame:
    """The labelled feature rows of the lake, with the schedule features joined by the flight key, a
    ``day`` column (datetime.date) and the categories as pandas categories of the year's values."""
    import pandas as pd

    features = pd.read_parquet(lake / "features")
    features[PARTITION] = features[PARTITION].astype(str)
    flights = pd.read_parquet(lake / "validated" / "flights",
                              columns=[PARTITION, "carrier", "flight", "origin", "sched_dep_time", "dest", "tailnum",
                                       "sched_arr_time", "arr_delay"])
    flights[PARTITION] = flights[PARTITION].astype(str)
    airports = pd.read_parquet(lake / "validated" / "airports", columns=["faa", "tzone"])
    zones = {**dict(zip(airports["faa"], airports["tzone"], strict=True)), **EXTRA_ZONES}
    zones = {k: v for k, v in zones.items() if isinstance(v, str) and "/" in v}
    schedule = schedule_features(flights, zones)
    history = flight_history(flights, schedule)
    rows = features[features[spec.label].notna()]
    # the study's own schedule and flight history: a lake whose features have them already (the
    # pipeline's since) gives its columns of the same names way
    made = (set(schedule.columns) | set(history.columns)) - set(FLIGHT_KEY)
    rows = rows.drop(columns=[c for c in rows.columns if c in made])
    rows = rows.merge(schedule, on=FLIGHT_KEY, how="left", validate="1:1")
    rows = rows.merge(history, on=FLIGHT_KEY, how="left", validate="1:1")
    rows["day"] = pd.to_datetime(rows[PARTITION]).dt.date
    for column in spec.categorical:
        rows[column] = rows[column].astype("string").astype("category")
    return rows.sort_values(["day", "origin", "sched_dep_time"], kind="stable").reset_index(drop=True)


def fit_lr(train: pd.DataFrame, serve: pd.DataFrame, cats: list[str], nums: list[str], label: str) -> np.ndarray:
    """Logistic regression: z-scored numbers (nulls at the mean, with a flag), one-hot categories
    (rarer than 5 rows: one infrequent column)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    encode = ColumnTransformer([
        ("num", make_pipeline(SimpleImputer(strategy="mean", add_indicator=True, keep_empty_features=True),
                              StandardScaler()), nums),
        ("cat", OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=5, sparse_output=False), cats),
    ], sparse_threshold=0)
    # Newton-Cholesky on the dense design (a few hundred columns): the same fit as lbfgs, 4x faster
    model = make_pipeline(encode, LogisticRegression(C=1.0, max_iter=500, solver="newton-cholesky"))

    def design(rows: pd.DataFrame) -> pd.DataFrame:
        frame = rows[[*cats, *nums]].copy()
        for c in cats:  # a null category is a category of its own
            frame[c] = frame[c].astype("string").fillna("(null)").astype(object)
        return frame

    model.fit(design(train), train[label].to_numpy())
    return model.predict_proba(design(serve))[:, 1]


def fit_xgb(train: pd.DataFrame, valid: pd.DataFrame | None, serve: pd.DataFrame, columns: list[str], label: str,
            rank: bool = False, trees: int = 0) -> tuple[np.ndarray, dict[str, Any]]:
    """XGBoost on :data:`XGB_PARAMS`, native categories: early stopping on ``valid``'s (pooled) ROC AUC,
    or ``trees`` trees and no ``valid``; with ``rank``, a pairwise ranker whose groups are the days.
    The served rows' scores and what the fit says (trees used, the top features by gain)."""
    import xgboost

    common = {**XGB_PARAMS, "tree_method": "hist", "n_jobs": 1, "random_state": 0, "enable_categorical": True,
              "max_cat_to_onehot": 1, "eval_metric": "auc"}
    if trees:
        common.update(n_estimators=trees, early_stopping_rounds=None)
    evals: dict[str, Any] = {} if valid is None else {"eval_set": [(valid[columns], valid[label])]}
    if rank:
        if valid is not None:
            evals["eval_qid"] = [valid["day_number"]]
        model = xgboost.XGBRanker(**common, objective="rank:pairwise")
        model.fit(train[columns], train[label], qid=train["day_number"], verbose=False, **evals)
        scores = model.predict(serve[columns])
    else:
        model = xgboost.XGBClassifier(**common)
        model.fit(train[columns], train[label], verbose=False, **evals)
        scores = model.predict_proba(serve[columns])[:, 1]
    gain = model.get_booster().get_score(importance_type="total_gain")
    total = sum(gain.values()) or 1.0
    top = dict(sorted(((k, v / total) for k, v in gain.items()), key=lambda kv: -kv[1])[:15])
    used = trees or int(model.best_iteration) + 1
    return scores, {"trees": used, "gain_share": top}


def fit_mlp(train: pd.DataFrame, serve: pd.DataFrame, cats: list[str], nums: list[str], label: str,
            train_spec: Any, seed: int) -> np.ndarray:
    """The pipeline's MLP (its preprocessor, net, optimiser and epochs) in this process, one thread."""
    import torch

    from jobs.model.tabular import Preprocessor, build_net, predict_proba, safe_std
    from jobs.training.steps import batch_loss

    vocab = {c: sorted(str(v) for v, n in train[c].value_counts().items() if n >= train_spec.min_category_count)
             for c in cats}
    mean = {c: float(train[c].mean()) if train[c].notna().any() else 0.0 for c in nums}
    pre = Preprocessor(cats, nums, vocab, mean, {c: safe_std(train[c].std(ddof=0)) for c in nums})
    torch.manual_seed(seed)
    codes, numbers = (torch.from_numpy(a) for a in pre.encode(train))
    labels = torch.tensor(train[label].to_numpy(), dtype=torch.float32)
    net = build_net(pre, dict(train_spec.hyperparameters))
    optimizer = torch.optim.AdamW(net.parameters(), lr=train_spec.learning_rate, weight_decay=train_spec.weight_decay)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for _ in range(train_spec.epochs):
        net.train()
        order = torch.randperm(len(labels))
        for start in range(0, len(labels), train_spec.batch_size):
            batch = order[start:start + train_spec.batch_size]
            optimizer.zero_grad()
            batch_loss(loss_fn, net(codes[batch], numbers[batch]), labels[batch]).backward()
            optimizer.step()
    return predict_proba(net, pre, serve)


def daily_metrics(days: Any, labels: Any, scores: Any, probabilities: bool) -> list[dict[str, Any]]:
    """Per served day: labelled rows, ROC AUC (None with one class) and log loss (None for scores)."""
    import numpy as np
    import pandas as pd
    from sklearn.metrics import log_loss, roc_auc_score

    frame = pd.DataFrame({"day": list(days), "y": np.asarray(labels), "p": np.asarray(scores, dtype="float64")})
    out = []
    for day, g in frame.groupby("day", sort=True):
        both = g.y.nunique() > 1
        out.append({"day": str(day), "rows": len(g), "roc_auc": float(roc_auc_score(g.y, g.p)) if both else None,
                    "log_loss": float(log_loss(g.y, np.clip(g.p, 1e-7, 1 - 1e-7), labels=[0, 1]))
                    if probabilities else None})
    return out


def weighted(days: list[dict[str, Any]], metric: str) -> float | None:
    """The rows-weighted mean of a daily metric (days without it left out)."""
    parts = [(d[metric], d["rows"]) for d in days if d.get(metric) is not None]
    total = sum(w for _, w in parts)
    return sum(v * w for v, w in parts) / total if total else None


def summarize(name: str, weeks: list[dict[str, Any]], reference: dict[str, float] | None) -> dict[str, Any]:
    """A contender's headline figures over its served weeks (``reference``: week -> lr's week figure)."""
    import numpy as np

    days = [d for w in weeks for d in w["days"]]
    aucs = [d["roc_auc"] for d in days if d["roc_auc"] is not None]
    week_losses = [(w["log_loss"], w["start"]) for w in weeks if w["log_loss"] is not None]
    worst = max(week_losses) if week_losses else (None, None)
    offsets: dict[int, list[dict[str, Any]]] = {}
    months: dict[str, list[dict[str, Any]]] = {}
    for w in weeks:
        for i, d in enumerate(w["days"]):
            offsets.setdefault(i, []).append(d)
            months.setdefault(d["day"][:7], []).append(d)
    beats = [w["roc_auc"] >= reference[w["start"]] for w in weeks if reference and w["start"] in reference]

    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 4)

    return {
        "contender": name, "days": len(days),
        "roc_auc": r(weighted(days, "roc_auc")), "roc_auc_day_mean": r(float(np.mean(aucs)) if aucs else None),
        "log_loss": r(weighted(days, "log_loss")),
        f"worst_{WEEK_DAYS}_days_log_loss": r(worst[0]), "worst_from": worst[1],
        "weeks_at_or_above_lr": round(sum(beats) / len(beats), 3) if beats else None,
        "by_day_in_week": {i: r(weighted(ds, "roc_auc")) for i, ds in sorted(offsets.items())},
        "by_month": {m: r(weighted(ds, "roc_auc")) for m, ds in sorted(months.items())},
        "seconds": round(sum(w["seconds"] for w in weeks), 1),
    }


def served_weeks(first: dt.date, last: dt.date, step: int) -> list[dt.date]:
    """The first days of the served weeks: ``first`` and every ``step`` days while the week ends by ``last``."""
    starts, start = [], first
    while start + dt.timedelta(days=WEEK_DAYS - 1) <= last:
        starts.append(start)
        start += dt.timedelta(days=step)
    return starts


def run_week(year: pd.DataFrame, start: dt.date, contender: Contender, spec: Any, train_spec: Any,
             scored: dict[str, np.ndarray]) -> dict[str, Any]:
    """One contender on one served week: trained on the ``contender.window`` days before ``start``.
    ``scored``: the week's scores of the contenders run before it (a blend reads its members'; this
    one's are added)."""
    began = time.perf_counter()
    end = start + dt.timedelta(days=WEEK_DAYS - 1)
    window = year[(year["day"] >= start - dt.timedelta(days=contender.window)) & (year["day"] < start)]
    serve = year[(year["day"] >= start) & (year["day"] <= end)]
    cats = list(spec.categorical)
    nums = [c for c in spec.model_numeric
            if (contender.history or not c.startswith("hist_")) and c not in contender.drop]
    nums += list(contender.extra)
    label = spec.label
    if contender.clip:  # at the window's labelled rows' range, as the pipeline's preprocessor records it
        labelled = window[window[label].notna()]
        serve = serve.assign(**{c: serve[c].clip(labelled[c].min(), labelled[c].max()) for c in nums})
    info: dict[str, Any] = {}
    if contender.family == "blend":
        scores = sum(scored[m] for m in contender.members) / len(contender.members)
    elif contender.family == "lr":
        scores = fit_lr(window, serve, cats, nums, label)
    elif contender.family == "mlp":
        hyper = {**train_spec.hyperparameters, **dict(contender.hyper)}
        scores = fit_mlp(window, serve, cats, nums, label, dataclasses.replace(train_spec, hyperparameters=hyper),
                         train_spec.seed)
    elif contender.trees:
        scores, info = fit_xgb(window, None, serve, [*cats, *nums], label, contender.family == "xgb_rank",
                               contender.trees)
    else:
        cut = start - dt.timedelta(days=VALIDATION_DAYS)
        scores, info = fit_xgb(window[window["day"] < cut], window[window["day"] >= cut], serve, [*cats, *nums],
                               label, rank=contender.family == "xgb_rank")
    scored[contender.name] = scores
    probabilities = contender.family != "xgb_rank"
    days = daily_metrics(serve["day"], serve[label], scores, probabilities)
    return {"start": start.isoformat(), "training_rows": len(window),
            "training_days": int(window["day"].nunique()), "days": days,
            "roc_auc": weighted(days, "roc_auc"), "log_loss": weighted(days, "log_loss"), **info,
            "seconds": time.perf_counter() - began}


def contrasts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """:data:`CONTRASTS` of the contenders the result holds: the difference of the headline over the
    served days both scored (for two windows, only the weeks whose training days differ), the mean and
    standard error of the per-week differences, and the weeks the first is ahead."""
    import numpy as np

    window = {c["name"]: c["window"] for c in result["contenders"]}
    out = []
    for question, a, b in CONTRASTS:
        if a not in result["weeks"] or b not in result["weeks"]:
            continue
        other = {w["start"]: w for w in result["weeks"][b]}
        pairs = [(w, other[w["start"]]) for w in result["weeks"][a] if w["start"] in other]
        if window[a] != window[b]:
            pairs = [(x, y) for x, y in pairs if x["training_days"] != y["training_days"]]
        if not pairs:
            continue
        deltas = np.array([x["roc_auc"] - y["roc_auc"] for x, y in pairs])
        days_a, days_b = [d for x, _ in pairs for d in x["days"]], [d for _, y in pairs for d in y["days"]]
        out.append({"question": question, "with": a, "without": b, "weeks": len(pairs),
                    "delta_roc_auc": round(weighted(days_a, "roc_auc") - weighted(days_b, "roc_auc"), 4),
                    "week_delta_mean": round(float(deltas.mean()), 4),
                    "week_delta_se": round(float(deltas.std(ddof=1) / np.sqrt(len(deltas))), 4) if len(deltas) > 1
                    else None, "weeks_ahead": int((deltas > 0).sum())})
    return out


def markdown(result: dict[str, Any]) -> str:
    """The report: the summary table, the per-week table and the per-month table."""
    summary, weeks = result["summary"], result["weeks"]
    names = [s["contender"] for s in summary]
    what = {c["name"]: c for c in result["contenders"]}
    worst = f"worst_{WEEK_DAYS}_days_log_loss"

    def f(v: Any) -> str:
        return "" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))

    lines = [
        "# Model study: daily realized ROC AUC by features, window and family", "",
        f"Generated by `python -m studies.model_study` ({result['served_weeks']} served weeks from "
        f"{result['args']['first']}, every {result['args']['step']} days; {result['labelled_rows']:,} labelled rows "
        f"of the year; {result['seconds'] / 60:.1f} min on one thread). Each contender is trained on the days before "
        "a served week and scores its 7 days with that one model; **ROC AUC** is the replay's measure, the mean of "
        "the daily ROC AUCs weighted by each day's labelled rows."
        + (" Added to the first run with `--add`: " + ", ".join(f"`{n}`" for n in result["added"]) + "."
           if result.get("added") else ""), "",
        "| contender | window | what | ROC AUC (rows-weighted) | ROC AUC (day mean) | log loss | "
        f"worst {WEEK_DAYS}-day log loss | weeks >= lr | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        c = what[s["contender"]]
        lines.append(f"| `{s['contender']}` | {c['window']} | {c['what']} | {f(s['roc_auc'])} | "
                     f"{f(s['roc_auc_day_mean'])} | {f(s['log_loss'])} | {f(s[worst])} | "
                     f"{f(s['weeks_at_or_above_lr'])} | {s['seconds']:.0f} |")
    if result.get("mlp_vs_best_baseline") is not None:
        lines += ["", f"`mlp` at or above the better of `lr` and `xgb` in {result['mlp_vs_best_baseline']:.0%} of "
                  "the weeks (the issue's bar: 70%)."]
    lines += ["", "## What moves it: paired differences of the served weeks", "",
              "ROC AUC difference (first minus second) of the rows-weighted daily ROC AUC over the weeks both served "
              "(window comparisons: only the weeks whose training days differ, the lake starts on 2013-01-01), the "
              "mean and standard error of the per-week differences, and the weeks the first is ahead.", "",
              "| what changes | first | second | weeks | difference | per-week mean +- SE | weeks ahead |",
              "|---|---|---|---|---|---|---|"]
    for c in result.get("contrasts") or contrasts(result):
        lines.append(f"| {c['question']} | `{c['with']}` | `{c['without']}` | {c['weeks']} | "
                     f"{c['delta_roc_auc']:+.4f} | {c['week_delta_mean']:+.4f} +- {f(c['week_delta_se'])} | "
                     f"{c['weeks_ahead']} |")
    lines += ["", "## Per served week (rows-weighted daily ROC AUC)", "",
              "| week | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
    for start in sorted({w["start"] for ws in weeks.values() for w in ws}):
        cells = [next((w["roc_auc"] for w in weeks[n] if w["start"] == start), None) for n in names]
        lines.append(f"| {start} | " + " | ".join(f(c) for c in cells) + " |")
    months = sorted({m for s in summary for m in s["by_month"]})
    lines += ["", "## Per month (rows-weighted daily ROC AUC)", "",
              "| contender | " + " | ".join(months) + " |", "|---|" + "---|" * len(months)]
    for s in summary:
        lines.append(f"| `{s['contender']}` | " + " | ".join(f(s["by_month"].get(m)) for m in months) + " |")
    step, first = result["args"]["step"], dt.date.fromisoformat(result["args"]["first"])
    same = f" With a step of {step} days every served week starts on a {first:%A}: the column is also the weekday." \
        if step % 7 == 0 else ""
    lines += ["", "## By day of the served week (0: the day after training; rows-weighted daily ROC AUC)", "",
              f"How a model ages over its week.{same}", "",
              "| contender | " + " | ".join(str(i) for i in range(WEEK_DAYS)) + " |",
              "|---|" + "---|" * WEEK_DAYS]
    for s in summary:
        lines.append(f"| `{s['contender']}` | " + " | ".join(f(s["by_day_in_week"].get(i)) for i in range(WEEK_DAYS))
                     + " |")
    gains = result.get("gain_share", {})
    if gains:
        lines += ["", "## XGBoost: share of total gain, mean over the weeks (top 12)", ""]
        for name, shares in gains.items():
            top = ", ".join(f"`{k}` {v:.3f}" for k, v in list(shares.items())[:12])
            lines.append(f"- `{name}`: {top}")
    return "\n".join(lines) + "\n"


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (its ``contenders`` and ``weeks``) with the figures made from them: the summary per
    contender, the MLP against the better baseline, XGBoost's gains, the contrasts."""
    import numpy as np

    weeks = result["weeks"]
    reference = {w["start"]: w["roc_auc"] for w in weeks.get("lr", [])}
    result["summary"] = [summarize(c["name"], weeks[c["name"]], reference) for c in result["contenders"]]
    if "mlp" in weeks and "lr" in weeks and "xgb" in weeks:
        best = {w["start"]: w["roc_auc"] for w in weeks["lr"]}
        for w in weeks["xgb"]:
            best[w["start"]] = max(best.get(w["start"], 0.0), w["roc_auc"])
        at_least = [w["roc_auc"] >= best[w["start"]] for w in weeks["mlp"]]
        result["mlp_vs_best_baseline"] = round(float(np.mean(at_least)), 3)
    gain: dict[str, dict[str, float]] = {}
    for name, ws in weeks.items():
        shares: dict[str, float] = {}
        for w in ws:
            for k, v in w.get("gain_share", {}).items():
                shares[k] = shares.get(k, 0.0) + v / len(ws)
        if shares:
            gain[name] = {k: round(v, 4) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}
    result["gain_share"] = gain
    result["contrasts"] = contrasts(result)
    return result


def rounded(value: Any) -> Any:
    """``value`` with every float rounded to 5 decimals (the JSON stays readable and small)."""
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> None:
    import torch

    from jobs.config import load_config

    args = parse_args(argv)
    began = time.perf_counter()
    before: dict[str, Any] | None = None
    if args.render or args.add:
        before = json.loads((args.out / "study.json").read_text())
    if args.render:
        result = figures(before)
    else:
        torch.set_num_threads(1)
        config = load_config(args.config)
        spec, train_spec = config.features, config.train
        year = load_year(args.lake, spec)
        year["day_number"] = year["day"].map(dt.date.toordinal)
        print(f"loaded {len(year):,} labelled rows in {time.perf_counter() - began:.1f}s", flush=True)
        if before is not None:  # --add: the served weeks and windows of the study it joins
            starts = sorted({dt.date.fromisoformat(w["start"]) for ws in before["weeks"].values() for w in ws})
            every = contenders(before["args"]["train_days"], tuple(before["args"]["xgb_windows"]))
        else:
            starts = served_weeks(args.first, args.last, args.step)
            every = contenders(args.train_days, args.xgb_windows)
        if args.contenders:
            unknown = set(args.contenders) - {c.name for c in every}
            if unknown:
                raise SystemExit(f"unknown contenders {sorted(unknown)}; known: {[c.name for c in every]}")
            wanted = set(args.contenders) | {m for c in every if c.name in args.contenders for m in c.members}
            every = [c for c in every if c.name in wanted]
        weeks: dict[str, list[dict[str, Any]]] = {c.name: [] for c in every}
        for start in starts:
            scored: dict[str, Any] = {}
            for contender in every:
                week = run_week(year, start, contender, spec, train_spec, scored)
                weeks[contender.name].append(week)
                print(f"{start} {contender.name:18s} auc {week['roc_auc']:.4f} rows {week['training_rows']:>7,} "
                      f"{week['seconds']:.1f}s", flush=True)
        seconds = round(time.perf_counter() - began, 1)
        if before is not None:
            known = [c for c in before["contenders"] if c["name"] not in weeks]
            result = {**before, "contenders": [*known, *(asdict(c) for c in every)],
                      "weeks": {**before["weeks"], **weeks}, "seconds": before["seconds"] + seconds,
                      "added": sorted({*before.get("added", []), *weeks})}
        else:
            result = {
                # the lake by its folder's name: no path of this machine in a committed report
                "args": {k: (v.name if isinstance(v, Path) else str(v) if isinstance(v, dt.date) else v)
                         for k, v in asdict(args).items()},
                "served_weeks": len(starts), "labelled_rows": len(year), "xgb_params": XGB_PARAMS,
                "schedule_columns": SCHEDULE_COLUMNS, "tail_columns": TAIL_COLUMNS,
                "flight_columns": FLIGHT_COLUMNS, "weather_columns": WEATHER_COLUMNS,
                "contenders": [asdict(c) for c in every], "weeks": weeks, "seconds": seconds,
            }
        result = figures(result)
    args.out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(rounded(result), indent=1, default=str)
    # innermost objects (a served day, a contender) on one line each: a tenth of the lines
    text = re.sub(r"\{[^{}\[\]]*\}", lambda m: re.sub(r"\s*\n\s*", " ", m.group(0)), text)
    (args.out / "study.json").write_text(text + "\n")
    report = markdown(result)
    (args.out / "study.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
