"""A plain, obviously correct model of SPEC §3–4 (Python loops; slow on purpose, tests only).

Given the records, their split into micro-batches (in arrival order) and the config, it
computes the watermark of every batch, which (record, window) pairs are too late, and the
final aggregates of every window (sessions by merging the accepted spans batch by batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from revise.config import EngineConfig


@dataclass(frozen=True)
class Rec:
    """One input record; ``rid`` identifies it (stored as the offset)."""

    key: str
    ts: int
    value: float
    rid: int


@dataclass
class WindowTruth:
    """Final aggregates of one window over its accepted records."""

    values: list[float] = field(default_factory=list)
    n_late: int = 0
    max_lateness: int = 0

    @property
    def count(self) -> int:
        return len(self.values)


@dataclass
class Truth:
    watermarks: list[int]
    final_watermark: int
    windows: dict[tuple[str, int, int], WindowTruth]
    too_late: set[tuple[int, int, int]]  # (rid, window_start, window_end)
    accepted: set[tuple[int, int, int]]  # fixed windows only
    close_batch: dict[tuple[str, int, int], int]  # batch index where the FINAL is due


def watermarks(batches: list[list[Rec]], delay_ms: int) -> tuple[list[int], int]:
    """Watermark in force for each batch (from batches before it) and after the last one."""
    out: list[int] = []
    wm = 0
    max_ts: int | None = None
    for batch in batches:
        out.append(wm)
        for r in batch:
            if max_ts is None or r.ts > max_ts:
                max_ts = r.ts
        if max_ts is not None:
            wm = max(wm, max_ts - delay_ms, 0)
    return out, wm


def windows_of(ts: int, size: int, advance: int) -> list[tuple[int, int]]:
    """Every aligned window [start, start+size) with start <= ts < start+size, by brute force."""
    out = []
    start = (ts // advance) * advance
    while start > ts - size:
        out.append((start, start + size))
        start -= advance
    return sorted(out)


def compute(config: EngineConfig, batches: list[list[Rec]]) -> Truth:
    wms, final_wm = watermarks(batches, config.watermark_delay_ms)
    if config.window.kind == "session":
        return _sessions(config, batches, wms, final_wm)
    size, adv, grace = config.window.size_ms, config.window.advance_ms, config.grace_ms
    wins: dict[tuple[str, int, int], WindowTruth] = {}
    too_late: set[tuple[int, int, int]] = set()
    accepted: set[tuple[int, int, int]] = set()
    for batch, w in zip(batches, wms, strict=True):
        for r in batch:
            for start, end in windows_of(r.ts, size, adv):
                if w >= end + grace:
                    too_late.add((r.rid, start, end))
                    continue
                accepted.add((r.rid, start, end))
                t = wins.setdefault((r.key, start, end), WindowTruth())
                t.values.append(r.value)
                if w >= end:
                    t.n_late += 1
                    t.max_lateness = max(t.max_lateness, w - r.ts)
    close_batch = {}
    for (key, start, end) in wins:
        due = next((i for i, w in enumerate(wms) if w >= end + grace), len(batches))
        close_batch[(key, start, end)] = due
    return Truth(wms, final_wm, wins, too_late, accepted, close_batch)


def _sessions(config: EngineConfig, batches: list[list[Rec]], wms: list[int],
              final_wm: int) -> Truth:
    gap, grace = config.window.gap_ms, config.grace_ms
    open_: dict[str, list[list]] = {}  # key -> [start, end, WindowTruth]
    done: dict[tuple[str, int, int], WindowTruth] = {}
    close_batch: dict[tuple[str, int, int], int] = {}
    too_late: set[tuple[int, int, int]] = set()
    for i, (batch, w) in enumerate(zip(batches, wms, strict=True)):
        for r in batch:
            if w >= r.ts + gap + grace:
                too_late.add((r.rid, r.ts, r.ts + gap))
                continue
            t = WindowTruth([r.value], int(w >= r.ts + gap), w - r.ts if w >= r.ts + gap else 0)
            new = [r.ts, r.ts + gap, t]
            keep = []
            for s in open_.get(r.key, []):
                if s[0] < new[1] and new[0] < s[1]:  # overlap (touching does not count)
                    new = [min(s[0], new[0]), max(s[1], new[1]), _merge(s[2], new[2])]
                else:
                    keep.append(s)
            open_[r.key] = [*keep, new]
        for key, sessions in open_.items():
            still = []
            for s in sessions:
                if w >= s[1] + grace:
                    done[(key, s[0], s[1])] = s[2]
                    close_batch[(key, s[0], s[1])] = i
                else:
                    still.append(s)
            open_[key] = still
    for key, sessions in open_.items():
        for s in sessions:
            done[(key, s[0], s[1])] = s[2]
            close_batch[(key, s[0], s[1])] = len(batches)
    return Truth(wms, final_wm, done, too_late, set(), close_batch)


def _merge(a: WindowTruth, b: WindowTruth) -> WindowTruth:
    return WindowTruth(a.values + b.values, a.n_late + b.n_late,
                       max(a.max_lateness, b.max_lateness))


# -- FN(FIELD) aggregates (issue 13): plain definitions the sketches must reproduce ----------


def field_b(value: float) -> float:
    """The second numeric field of a test record (``b.c``), derived from its value."""
    return abs(value) * 3.0 + 0.5


def field_u(value: float) -> str:
    """The distinct field of a test record (``u``): few distinct texts, some non-ASCII."""
    return ["x", "y", "z", "é", "x y"][int(value * 4) % 5]


def percentile(values: list[float], percent: int) -> float:
    """The ``percent``-th percentile as the sketch defines it, on its bucket representative.

    Rank ``r = max(1, ceil(percent * n / 100))`` in integers; the ``r``-th smallest value is
    reported as the representative of its bucket (within 1 % of the value).
    """
    from windows.sketches import QuantileSketch

    n = len(values)
    r = max(1, -(-percent * n // 100))
    x = sorted(values)[r - 1]
    sk = QuantileSketch()
    return float(sk.representative(sk.slots_of([x]))[0])


def distinct(texts: list[str]) -> int:
    """The exact number of distinct texts (the sketch is exact below 16,384)."""
    return len(set(texts))
