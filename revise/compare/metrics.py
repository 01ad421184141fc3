"""The figures of ``revise compare``: pure functions over pandas tables of revisions.

Nothing here touches Spark, Kafka or Delta, reads a clock or draws: each function takes the
revisions of one mode (the SPEC §4 columns of the Delta ``revisions`` table, as a pandas
DataFrame) and returns a table or a small frozen record, so every figure can be checked by hand
on a few rows (``tests/revise/test_compare_metrics.py``).

Definitions (all times int64 ms; windows are half-open ``[window_start_ms, window_end_ms)``):

- A *window* is one ``(key, window_start_ms, window_end_ms)`` that received a ``FINAL``
  revision. Superseded session bounds (``retracted``) are not windows of their own.
- *Event-time latency* of a revision = ``watermark_ms - window_end_ms``: how far event time
  had moved past the window's end when it was emitted (negative: before the window ended).
  Per window: to the *first result* (revision 0), to the *final value* (the first revision whose
  count, sum and mean equal the FINAL's), and to the ``FINAL`` revision itself.
- *Wall-clock latency*: ``emitted_at_ms`` of the revision minus the Kafka timestamp (arrival)
  of the window's first accepted record (first result) or of its last accepted record (final
  value). Meaningful only when the input arrives while the job runs (``revise compare --rate``).
- *Accuracy at d ms after the window's end*: the latest revision with
  ``watermark_ms - window_end_ms <= d`` compared with the FINAL: relative error
  ``|x - final| / |final|`` (0 when both are 0) of count, sum and mean; a window with no answer
  yet counts as error 1 (100 %) and not exact.

Trace (tumbling 10 s, window ``[0,10000)``; revisions at watermarks 4000 (count 2, EARLY),
11000 (count 3, LATE), 15000 (count 3, FINAL)) → first-result latency −6000 ms, final-value
latency 1000 ms, FINAL latency 5000 ms; at d = 0 the count error is |2−3|/3 = 0.33, at
d = 1000 it is 0 (exact).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from revise.aggspec import AggList
from revise.vocab import WINDOW_BOUNDS

__all__ = [
    "ACCURACY_FIELDS",
    "accuracy_fields",
    "Percentiles",
    "Volume",
    "accuracy_over_time",
    "anchor_initial_watermark",
    "percentiles",
    "revisions_per_window",
    "volume",
    "wallclock_latency",
    "window_summary",
]

ACCURACY_FIELDS: tuple[str, ...] = ("count", "sum", "mean")
"""The aggregates whose error over time is tracked (those requested by the run)."""


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Percentiles:
    """p50/p95/p99 (numpy's linear interpolation), mean and count of a sample; None when empty."""

    n: int
    p50: float | None
    p95: float | None
    p99: float | None
    mean: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-ready plain values."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Volume:
    """What a mode wrote for its input.

    Attributes:
        input_records: Records read from the input topic (good, late and bad).
        revisions: Revisions written (changelog messages = ``revisions`` rows).
        changelog_bytes: Bytes of the changelog messages (JSON key + value).
        windows: Windows closed with a FINAL.
    """

    input_records: int
    revisions: int
    changelog_bytes: int
    windows: int

    @property
    def revisions_per_input(self) -> float:
        """Revisions written per input record."""
        return self.revisions / self.input_records if self.input_records else math.nan

    @property
    def bytes_per_input(self) -> float:
        """Changelog bytes written per input record."""
        return self.changelog_bytes / self.input_records if self.input_records else math.nan

    @property
    def revisions_per_window(self) -> float:
        """Mean revisions per closed window."""
        return self.revisions / self.windows if self.windows else math.nan

    def to_dict(self) -> dict[str, float | int]:
        """JSON-ready plain values, derived ratios included."""
        return {
            **asdict(self),
            "revisions_per_input": self.revisions_per_input,
            "bytes_per_input": self.bytes_per_input,
            "revisions_per_window": self.revisions_per_window,
        }


# --------------------------------------------------------------------------- helpers


def percentiles(values: Iterable[float] | npt.NDArray[np.generic]) -> Percentiles:
    """p50, p95, p99 (linear interpolation, numpy's default) and mean, NaN and None dropped.

    >>> percentiles([0, 10, 20, 30, 40]).p50
    20.0
    """
    arr = np.asarray(pd.to_numeric(pd.Series(list(values), dtype="float64")).dropna(),
                     dtype=np.float64)
    if len(arr) == 0:
        return Percentiles(0, None, None, None, None)
    p50, p95, p99 = (float(x) for x in np.percentile(arr, [50, 95, 99]))
    return Percentiles(len(arr), p50, p95, p99, float(arr.mean()))


def _same(a: pd.Series, b: pd.Series) -> pd.Series:
    """Element-wise equality of aggregate columns: both null, or equal within 1e-9 relative."""
    both_null = a.isna() & b.isna()
    av = a.astype("float64").to_numpy()
    bv = b.astype("float64").to_numpy()
    close = np.isclose(av, bv, rtol=1e-9, atol=1e-12, equal_nan=False)
    return pd.Series(both_null.to_numpy() | close, index=a.index)


def accuracy_fields(aggs: AggList) -> tuple[str, ...]:
    """The columns accuracy is measured on, for ``--aggs``.

    :data:`ACCURACY_FIELDS` for the bare form; else ``count`` (when requested) and the first
    other aggregate requested.

    ``count,p99(latency_ms),distinct(user)`` → ``("count", "p99_latency_ms")``.
    """
    if aggs.bare:
        return ACCURACY_FIELDS
    counts = tuple(c for c in aggs.columns if c == "count")
    others = tuple(c for c in aggs.columns if c != "count")[:1]
    return counts + others


def _requested(revisions: pd.DataFrame, fields: Sequence[str]) -> list[str]:
    """The accuracy aggregates that carry values in this run (not requested → all null)."""
    return [f for f in fields if f in revisions and revisions[f].notna().any()]


def _rel_err(x: pd.Series, final: pd.Series) -> pd.Series:
    xv = x.astype("float64").to_numpy()
    fv = final.astype("float64").to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.abs(xv - fv) / np.abs(fv)
    err = np.where(np.isclose(xv, fv, rtol=1e-9, atol=1e-12), 0.0, err)
    err = np.where(np.isnan(xv), 1.0, err)  # no answer yet
    return pd.Series(np.minimum(np.nan_to_num(err, nan=1.0, posinf=1.0), 1e9), index=x.index)


# --------------------------------------------------------------------------- per window


def anchor_initial_watermark(revisions: pd.DataFrame, floor_ms: int) -> pd.DataFrame:
    """Place revisions emitted before any watermark existed at ``floor_ms``.

    The first micro-batch runs with watermark 0 (nothing seen yet), so its revisions would
    have a latency of minus the epoch. They are moved to ``floor_ms`` (``revise compare`` uses
    the run's first real watermark: those revisions came no later than that).

    >>> anchor_initial_watermark(pd.DataFrame({"watermark_ms": [0, 5000]}), 1000)
       watermark_ms
    0          1000
    1          5000
    """
    out = revisions.copy()
    out["watermark_ms"] = np.maximum(out["watermark_ms"].to_numpy(dtype=np.int64), floor_ms)
    return out



def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    r"""``frame`` with its ``key`` column as Arrow strings, for grouping by key.

    pandas' hash table reads an object string only up to its first NUL, so ``groupby`` put
    ``"a"`` and ``"a\0b"`` in one group; Arrow's hashing reads the whole string.
    """
    if "key" in frame.columns and frame["key"].dtype == object:
        return frame.assign(key=frame["key"].astype("string[pyarrow]"))
    return frame


def window_summary(revisions: pd.DataFrame,
                   fields: Sequence[str] = ACCURACY_FIELDS) -> pd.DataFrame:
    """One row per closed window of one mode: revision counts and latencies.

    Args:
        revisions: Revisions of one query (SPEC §4 columns; extra columns ignored).
        fields: The aggregates "final value" compares (:func:`accuracy_fields`).

    Returns:
        Columns ``key, window_start_ms, window_end_ms, n_revisions`` (revisions with these
        bounds, FINAL included), ``first_latency_ms`` (revision 0's ``watermark_ms - end``),
        ``final_value_latency_ms`` (first revision equal to the FINAL in ``fields``: count, sum
        and mean by default), ``final_latency_ms`` (the FINAL's), ``first_emitted_at_ms``,
        ``final_value_emitted_at_ms``, ``final_emitted_at_ms``, and the FINAL's ``fields``;
        sorted by key and bounds. Session bounds that were retracted and
        never closed are left out.
    """
    cols = [*WINDOW_BOUNDS, "n_revisions", "first_latency_ms", "final_value_latency_ms",
            "final_latency_ms", "first_emitted_at_ms", "final_value_emitted_at_ms",
            "final_emitted_at_ms", *fields]
    if revisions.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    revs = _keyed(revisions).sort_values([*WINDOW_BOUNDS, "revision"], kind="stable")
    finals = revs[revs["is_final"] & ~revs["retracted"]]
    id_cols = list(WINDOW_BOUNDS)
    final_cols = finals[[*id_cols, *fields, "watermark_ms", "emitted_at_ms"]].rename(
        columns={**{f: f"final_{f}" for f in fields},
                 "watermark_ms": "final_wm", "emitted_at_ms": "final_emitted_at_ms"}
    )
    joined = revs.merge(final_cols, on=id_cols, how="inner")
    aggs = _requested(revisions, fields)
    equal = pd.Series(True, index=joined.index)
    for f in aggs:
        equal &= _same(joined[f], joined[f"final_{f}"])
    joined["_equal"] = equal
    grouped = joined.groupby(id_cols, sort=True)
    first = grouped.first()
    eq = joined[joined["_equal"]].groupby(id_cols, sort=True).first()
    end = first.index.get_level_values("window_end_ms").to_numpy()
    eq_end = eq.index.get_level_values("window_end_ms").to_numpy()
    out = pd.DataFrame({
        "n_revisions": grouped.size(),
        "first_latency_ms": first["watermark_ms"] - end,
        "final_value_latency_ms": eq["watermark_ms"] - eq_end,
        "final_latency_ms": first["final_wm"] - end,
        "first_emitted_at_ms": first["emitted_at_ms"],
        "final_value_emitted_at_ms": eq["emitted_at_ms"],
        "final_emitted_at_ms": first["final_emitted_at_ms"],
        **{f: first[f"final_{f}"] for f in fields},
    }).reset_index()
    return out[cols]


def revisions_per_window(summary: pd.DataFrame) -> dict[int, int]:
    """Histogram of revisions per closed window: ``{n_revisions: windows}``, ascending."""
    counts = summary["n_revisions"].astype("int64").value_counts().sort_index()
    return {int(k): int(v) for k, v in counts.items()}


def volume(revisions: pd.DataFrame, *, input_records: int, changelog_bytes: int) -> Volume:
    """Output volume of one mode; ``changelog_bytes`` is measured by the caller."""
    windows = int((revisions["is_final"] & ~revisions["retracted"]).sum()) if len(revisions) else 0
    return Volume(int(input_records), len(revisions), int(changelog_bytes), windows)


# --------------------------------------------------------------------------- accuracy


def accuracy_over_time(revisions: pd.DataFrame, grid_ms: Sequence[int],
                       fields: Sequence[str] = ACCURACY_FIELDS, *,
                       truth: pd.DataFrame | None = None) -> pd.DataFrame:
    """Error of the latest revision against the FINAL, ``d`` ms after each window's end.

    For every ``d`` in ``grid_ms`` and every closed window, take the latest revision with
    ``watermark_ms - window_end_ms <= d`` and compare it with the window's FINAL (or with
    ``truth``).

    Args:
        revisions: Revisions of one query.
        grid_ms: Offsets from the window end (event time, ms), e.g. ``range(-10000, 20001, 1000)``.
        fields: The aggregates compared (:func:`accuracy_fields`; count, sum, mean by default).
        truth: ``key, window_start_ms, window_end_ms`` and ``fields`` of the true final value
            of every window; None: the revisions' own FINALs. A true window the revisions
            never answered counts as unanswered at every ``d``.

    Returns:
        One row per ``d``: ``since_end_ms``, ``rel_err_<field>`` per field (``rel_err_count``,
        ``rel_err_sum``, ``rel_err_mean`` by default; mean over windows; a window without an
        answer yet counts 1),
        ``share_exact`` (windows whose latest revision equals the FINAL in every requested
        aggregate), ``share_answered`` (windows with at least one revision). Aggregates not
        requested by the run are NaN.
    """
    grid = np.asarray(sorted(int(g) for g in grid_ms), dtype=np.int64)
    cols = ["since_end_ms", *(f"rel_err_{f}" for f in fields), "share_exact",
            "share_answered"]
    if revisions.empty or len(grid) == 0:
        return pd.DataFrame({"since_end_ms": grid,
                             **{c: np.full(len(grid), np.nan) for c in cols[1:]}})[cols]
    aggs = _requested(revisions, fields)
    revs = _keyed(revisions).sort_values([*WINDOW_BOUNDS, "revision"], kind="stable")
    finals = (revs[revs["is_final"] & ~revs["retracted"]] if truth is None
              else _keyed(truth))
    ids = list(WINDOW_BOUNDS)
    revs = revs.merge(finals[[*ids, *fields]].rename(
        columns={f: f"final_{f}" for f in fields}), on=ids, how="inner")
    revs["since_end_ms"] = revs["watermark_ms"] - revs["window_end_ms"]
    windows = finals[ids].reset_index(drop=True)
    n = len(windows)
    rows: list[dict[str, float]] = []
    for d in grid:
        seen = revs[revs["since_end_ms"] <= d]
        latest = seen.groupby(ids, sort=False).tail(1)  # sorted by revision within a window
        frame = windows.merge(latest, on=ids, how="left")
        frame = frame.merge(finals[[*ids, *fields]].rename(
            columns={f: f"truth_{f}" for f in fields}), on=ids, how="left")
        row: dict[str, float] = {"since_end_ms": float(d)}
        exact = pd.Series(frame["revision"].notna().to_numpy(), index=frame.index)
        for f in fields:
            if f in aggs:
                err = _rel_err(frame[f], frame[f"truth_{f}"])
                row[f"rel_err_{f}"] = float(err.mean()) if n else math.nan
                exact &= err == 0.0
            else:
                row[f"rel_err_{f}"] = math.nan
        row["share_exact"] = float(exact.mean()) if n else math.nan
        row["share_answered"] = float(frame["revision"].notna().mean()) if n else math.nan
        rows.append(row)
    out = pd.DataFrame(rows, columns=cols)
    out["since_end_ms"] = out["since_end_ms"].astype("int64")
    return out


# --------------------------------------------------------------------------- wall clock


def wallclock_latency(
    summary: pd.DataFrame,
    arrivals: pd.DataFrame,
    late: pd.DataFrame,
    *,
    record_span_ms: int = 0,
) -> pd.DataFrame:
    """Wall-clock latency per window: from the records' arrival in Kafka to the emission.

    A record ``(key, ts_ms)`` belongs to window ``(key, [start, end))`` when ``start <= ts_ms <
    end`` (tumbling, hopping; ``record_span_ms = 0``) or when its span ``[ts_ms, ts_ms +
    record_span_ms)`` lies inside it (sessions: the gap). It is *accepted* there unless the late
    table holds ``(partition, offset, window_start_ms, window_end_ms)`` for it.

    Args:
        summary: :func:`window_summary` of one mode.
        arrivals: Input records: ``key, ts_ms, partition, offset, arrival_ms`` (Kafka
            timestamp, epoch ms).
        late: Too-late records of the mode: ``partition, offset, window_start_ms,
            window_end_ms``.
        record_span_ms: 0 for fixed windows, the session gap for sessions.

    Returns:
        ``key, window_start_ms, window_end_ms, first_wall_ms`` (first result's
        ``emitted_at_ms`` minus the earliest accepted arrival) and ``final_wall_ms`` (the
        final value's ``emitted_at_ms`` minus the latest accepted arrival).
    """
    ids = list(WINDOW_BOUNDS)
    wins = _keyed(summary[[*ids, "first_emitted_at_ms", "final_value_emitted_at_ms"]])
    pairs = wins.merge(_keyed(arrivals[["key", "ts_ms", "partition", "offset", "arrival_ms"]]),
                       on="key")
    if record_span_ms > 0:
        inside = (pairs["ts_ms"] >= pairs["window_start_ms"]) & (
            pairs["ts_ms"] + record_span_ms <= pairs["window_end_ms"])
    else:
        inside = (pairs["ts_ms"] >= pairs["window_start_ms"]) & (
            pairs["ts_ms"] < pairs["window_end_ms"])
    pairs = pairs[inside]
    if len(late):
        marks = late[["partition", "offset", "window_start_ms", "window_end_ms"]].assign(_late=True)
        pairs = pairs.merge(marks, on=["partition", "offset", "window_start_ms", "window_end_ms"],
                            how="left")
        pairs = pairs[pairs["_late"].isna()]
    g = pairs.groupby(ids, sort=True).agg(
        first_arrival=("arrival_ms", "min"), last_arrival=("arrival_ms", "max"))
    out = wins.merge(g.reset_index(), on=ids, how="left")
    out["first_wall_ms"] = out["first_emitted_at_ms"] - out["first_arrival"]
    out["final_wall_ms"] = out["final_value_emitted_at_ms"] - out["last_arrival"]
    return out[[*ids, "first_wall_ms", "final_wall_ms"]]
