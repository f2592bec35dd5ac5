"""The corpus of bad inputs: each case is the real flights file of one day with one thing broken,
and the outcome validation must reach. Cases are recipes over the real bytes (not stored copies),
so they stay in step with what `jobs.datasets.land_flights` writes.

An outcome is either a hard failure (``check``: the batch check that fails the run, ``says``:
text the message must contain, ``{previous}`` standing for the day before the broken one) or
row-level (``quarantined``: the rows held back, ``rules``: rows per rule that must be among the
rules they broke).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

Mutation = Callable[[bytes, bytes], bytes]  # (the day's file, the previous day's file) -> the bad file


@dataclass(frozen=True)
class Case:
    name: str
    mutate: Mutation
    check: str | None = None
    says: str = ""
    quarantined: int = 0
    rules: dict[str, int] = field(default_factory=dict)

    @property
    def hard(self) -> bool:
        return self.check is not None


def edit(change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[bytes, bytes], bytes]:
    """A mutation of the parsed table, written back as `jobs.datasets.land_flights` writes it (all values as text)."""

    def mutate(data: bytes, _previous: bytes) -> bytes:
        frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
        out = io.StringIO()
        change(frame).to_csv(out, index=False)
        return out.getvalue().encode()

    return mutate


def set_rows(column: str, value: str, rows: list[int] | slice) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        frame.loc[frame.index[rows], column] = value
        return frame

    return change


def cut_mid_line(data: bytes, _previous: bytes) -> bytes:
    """Cut the file after the 5th field of a line 90% of the way in, as an interrupted copy would."""
    start = data.index(b"\n", int(len(data) * 0.9)) + 1
    pos = start
    for _ in range(5):
        pos = data.index(b",", pos) + 1
    return data[:pos]


def non_utf8_byte(data: bytes, _previous: bytes) -> bytes:
    """One byte of the 6th line's tail number (an `N`) replaced by 0xFF, which is never UTF-8."""
    lines = data.split(b"\n")
    lines[5] = lines[5].replace(b",N", b",\xff", 1)
    return b"\n".join(lines)


CASES = [
    Case("truncated_mid_line", cut_mid_line, quarantined=1, rules={"well_formed_line": 1}),
    Case("truncated_file", lambda d, _: d[: d.index(b"\n", int(len(d) * 0.4)) + 1],
         check="row_count_in_band", says="the band is 0.5x..2x"),
    Case("wrong_column_type", edit(lambda f: f.assign(dep_delay=f["dep_delay"] + " min")),
         check="column_type:dep_delay", says="declared double but none of its"),
    Case("unparseable_values", edit(set_rows("dep_time", "5:17", [3, 4])), quarantined=2, rules={"dep_time_is_int": 2}),
    Case("renamed_column", edit(lambda f: f.rename(columns={"dest": "destination"})),
         check="header_matches_schema", says="'dest' renamed to 'destination'"),
    Case("extra_column", edit(lambda f: f.assign(gate="B12")),
         check="header_matches_schema", says="undeclared column(s) ['gate']"),
    Case("empty_partition", edit(lambda f: f.iloc[0:0]), check="partition_not_empty", says="no rows"),
    Case("null_keys", edit(set_rows("carrier", "NA", [0, 7, 9])), quarantined=3, rules={"carrier_not_null": 3}),
    Case("negative_distance", edit(set_rows("distance", "-5", [1, 2])), quarantined=2, rules={"distance_positive": 2}),
    Case("duplicate_flights", edit(lambda f: pd.concat([f, f.iloc[[10, 20]]])),
         quarantined=4, rules={"flight_key_unique": 4}),
    Case("unknown_carrier", edit(set_rows("carrier", "ZZ", [5])), quarantined=1, rules={"carrier_known": 1}),
    Case("another_days_rows", lambda _d, previous: previous,
         check="rows_dated_partition_day", says="are dated ['{previous}']"),
    Case("non_utf8_byte", non_utf8_byte, quarantined=1, rules={"valid_utf8": 1}),
    Case("high_quarantine_rate", edit(set_rows("distance", "0", slice(0, 90))),
         check="quarantine_rate", says="above the limit of 5.0%"),
]
