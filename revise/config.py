"""Engine configuration: durations, window specs and the frozen, self-validating EngineConfig.

Durations are integers with a unit: ``500ms``, ``10s``, ``5m``, ``1h``, ``1d`` (stored as int ms;
a day is 86,400,000 ms: event time has no leap seconds or time zones).
Window specs: ``tumbling:SIZE``, ``hopping:SIZE:ADVANCE``, ``session:GAP``.

Trace: ``WindowSpec.parse("hopping:10s:5s") → WindowSpec(kind="hopping", size_ms=10000,
advance_ms=5000)``; ``str(...)`` gives back ``"hopping:10s:5s"``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, get_args

from revise.aggspec import BARE_NAMES, AggList
from revise.errors import ConfigError
from revise.vocab import MODES, Mode, UnknownWord, as_mode

__all__ = [
    "EmitPolicy",
    "EngineConfig",
    "Mode",
    "WindowKind",
    "WindowSpec",
    "format_duration",
    "parse_mode",
    "parse_duration",
]

WindowKind = Literal["tumbling", "hopping", "session"]

_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_BARE = re.compile(r"^\s*\d+\s*$")


def parse_duration(text: str, *, option: str = "duration") -> int:
    """Parse ``500ms``, ``10s``, ``5m``, ``1h`` or ``1d`` into integer milliseconds (>= 0).

    Args:
        text: The duration text; the unit is required.
        option: Where the text came from (e.g. ``--grace``), used in error messages.

    Returns:
        The duration in ms.

    Raises:
        ConfigError: On a missing unit, an unknown unit, a fraction or a negative value; the
            message says how to write it, e.g. ``--grace "10" has no unit; write 10s or 10000ms``.
    """
    if not isinstance(text, str):
        msg = f"{option} must be a duration text such as 10s, got {text!r}"
        raise ConfigError(msg)
    m = _DURATION.match(text)
    if m:
        return int(m.group(1)) * _UNITS_MS[m.group(2)]
    if _BARE.match(text):
        n = text.strip()
        msg = f'{option} "{text}" has no unit; write {n}s or {int(n) * 1000}ms'
        raise ConfigError(msg)
    msg = (
        f'{option} "{text}" is not a duration; write a whole number with a unit '
        "ms, s, m, h or d, e.g. 500ms, 10s, 5m, 1h, 1d"
    )
    raise ConfigError(msg)


def format_duration(ms: int) -> str:
    """Shortest exact text for ``ms``: 86400000 → ``1d``, 3600000 → ``1h``, 1500 → ``1500ms``."""
    for unit in ("d", "h", "m", "s"):
        scale = _UNITS_MS[unit]
        if ms and ms % scale == 0:
            return f"{ms // scale}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """A window kind and its lengths in ms; windows are half-open ``[start_ms, end_ms)``.

    Attributes:
        kind: ``tumbling``, ``hopping`` or ``session``.
        size_ms: Window length (tumbling, hopping); 0 for sessions.
        advance_ms: Distance between window starts (hopping; equals ``size_ms`` for tumbling,
            filled in if left 0); 0 for sessions. ``0 < advance_ms <= size_ms``; ``size_ms``
            need not be a multiple of it.
        gap_ms: Session gap (sessions only): a record spans ``[ts, ts + gap_ms)``.
    """

    kind: WindowKind
    size_ms: int = 0
    advance_ms: int = 0
    gap_ms: int = 0

    def __post_init__(self) -> None:
        if self.kind not in get_args(WindowKind):
            msg = (
                f"unknown window kind {self.kind!r}; use tumbling:SIZE, hopping:SIZE:ADVANCE "
                "or session:GAP"
            )
            raise ConfigError(msg)
        for name in ("size_ms", "advance_ms", "gap_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                msg = f"window {name} must be an integer >= 0 ms, got {value!r}"
                raise ConfigError(msg)
        if self.kind == "tumbling" and self.advance_ms == 0:
            object.__setattr__(self, "advance_ms", self.size_ms)
        if self.kind == "session":
            if self.gap_ms <= 0:
                msg = f"session gap must be > 0, got {self.gap_ms}ms; write e.g. session:30s"
                raise ConfigError(msg)
            if self.size_ms or self.advance_ms:
                msg = "session windows take only a gap; write session:GAP, e.g. session:30s"
                raise ConfigError(msg)
            return
        if self.gap_ms:
            msg = f"{self.kind} windows take no gap; write e.g. tumbling:10s or hopping:10s:5s"
            raise ConfigError(msg)
        if self.size_ms <= 0:
            msg = f"{self.kind} window size must be > 0, got {self.size_ms}ms; e.g. tumbling:10s"
            raise ConfigError(msg)
        if self.kind == "tumbling" and self.advance_ms != self.size_ms:
            msg = "tumbling windows advance by their size; for another advance use hopping:SIZE:ADV"
            raise ConfigError(msg)
        if not 0 < self.advance_ms <= self.size_ms:
            msg = (
                f"hopping advance must be > 0 and <= size ({format_duration(self.size_ms)}), got "
                f"{format_duration(self.advance_ms)}; records between windows would be lost — "
                f"write e.g. hopping:{format_duration(self.size_ms)}:"
                f"{format_duration(max(1, self.size_ms // 2))}"
            )
            raise ConfigError(msg)

    @staticmethod
    def parse(text: str) -> WindowSpec:
        """Parse ``tumbling:10s``, ``hopping:10s:5s`` or ``session:30s``.

        Raises:
            ConfigError: Naming the bad part and the fix, e.g.
                ``--window "tumbling:10" has no unit; write tumbling:10s or tumbling:10000ms``.
        """
        if not isinstance(text, str):
            msg = f"--window must be text such as tumbling:10s, got {text!r}"
            raise ConfigError(msg)
        parts = [p.strip() for p in text.strip().split(":")]
        kind = parts[0].lower()
        arity = {"tumbling": 1, "hopping": 2, "session": 1}
        if kind not in arity:
            msg = (
                f'--window "{text}" has unknown kind {parts[0]!r}; write tumbling:10s, '
                "hopping:10s:5s or session:30s"
            )
            raise ConfigError(msg)
        if len(parts) - 1 != arity[kind]:
            example = {"tumbling": "tumbling:10s", "hopping": "hopping:10s:5s",
                       "session": "session:30s"}[kind]
            msg = f'--window "{text}" needs {arity[kind]} duration(s) after {kind}:; e.g. {example}'
            raise ConfigError(msg)
        ms: list[int] = []
        for i, p in enumerate(parts[1:], start=1):
            if _BARE.match(p):
                fixed_s = ":".join([*parts[:i], f"{p}s", *parts[i + 1 :]])
                fixed_ms = ":".join([*parts[:i], f"{int(p) * 1000}ms", *parts[i + 1 :]])
                msg = f'--window "{text}" has no unit; write {fixed_s} or {fixed_ms}'
                raise ConfigError(msg)
            ms.append(parse_duration(p, option=f'--window "{text}" part'))
        if kind == "tumbling":
            return WindowSpec("tumbling", size_ms=ms[0])
        if kind == "hopping":
            return WindowSpec("hopping", size_ms=ms[0], advance_ms=ms[1])
        return WindowSpec("session", gap_ms=ms[0])

    def __str__(self) -> str:
        if self.kind == "tumbling":
            return f"tumbling:{format_duration(self.size_ms)}"
        if self.kind == "hopping":
            return f"hopping:{format_duration(self.size_ms)}:{format_duration(self.advance_ms)}"
        return f"session:{format_duration(self.gap_ms)}"


def parse_mode(text: str) -> Mode:
    """``"revision"`` or ``"watermark"`` as a :data:`~revise.vocab.Mode`.

    Raises:
        ConfigError: Any other text.
    """
    try:
        return as_mode(text)
    except UnknownWord:
        msg = f"--mode {text!r} is not a mode; write --mode revision or --mode watermark"
        raise ConfigError(msg) from None


@dataclass(frozen=True, slots=True)
class EmitPolicy:
    """How often a window's EARLY/LATE revisions are emitted (revision mode; docs/SEMANTICS.md).

    A window's revision 0, its retractions, a session's revision under new bounds and its FINAL
    are always emitted; any other revision only when every set rule allows it, judged against
    the window's last *emitted* revision.

    Attributes:
        min_change: Emit only when some requested aggregate column changed by at least this
            relative amount (0.1 = 10 %) since the last emitted revision: ``|new - old| >=
            min_change * |old|`` and ``new != old`` (so from 0 any change counts; a null
            becoming a value or back counts). None or 0: every change.
        every_ms: Emit at most once per this many ms of watermark progress: only when
            ``watermark - (watermark of the last emitted revision) >= every_ms``. None: no limit.

    Trace (tumbling 10s, ``min_change=0.5``): counts 2 (rev 0), 3 (+50 %, rev 1), 4 (+33 % of
    3, suppressed), 5 (+67 % of 3, rev 2), FINAL 5 (rev 3, ``prev_count=5``).
    """

    min_change: float | None = None
    every_ms: int | None = None


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything that decides the engine's output (the caller supplies the watermark).

    Attributes:
        window: The window spec.
        grace_ms: How long after ``window_end`` a window still accepts records (>= 0 ms): a
            window accepts while ``watermark < window_end + grace_ms`` and closes (FINAL) in
            the first batch whose watermark reaches ``window_end + grace_ms``.
        watermark_delay_ms: Watermark = max accepted event time − this (>= 0 ms); used by the
            caller's watermark tracker, not by the engine itself.
        aggs: The aggregates to emit (:class:`~revise.aggspec.AggList`, ``--aggs`` parsed);
            by default ``count,sum,min,max,mean`` of the record value.
        mode: ``revision`` (every change, then FINAL) or ``watermark`` (only FINAL, rev 0).
        query_id: Stable job id carried by every revision.
        emit_min_change: ``--emit-min-change`` (:attr:`EmitPolicy.min_change`, >= 0;
            revision mode only). None: not set.
        emit_every_ms: ``--emit-every`` (:attr:`EmitPolicy.every_ms`, > 0 ms; revision mode
            only). None: not set.

    Trace: ``EngineConfig(w, 0, aggs=AggList.parse("count,p99(lat)")).aggs.columns`` is
    ``("count", "p99_lat")``; ``AggList.parse("count,sum")`` gives columns ``count, sum``.
    """

    window: WindowSpec
    grace_ms: int
    watermark_delay_ms: int = 0
    aggs: AggList = AggList.parse(",".join(BARE_NAMES))
    mode: Mode = "revision"
    query_id: str = "revise"
    emit_min_change: float | None = None
    emit_every_ms: int | None = None

    @property
    def emit_policy(self) -> EmitPolicy | None:
        """The emit policy, None when neither option is set (every change is emitted)."""
        if self.emit_min_change is None and self.emit_every_ms is None:
            return None
        return EmitPolicy(self.emit_min_change, self.emit_every_ms)

    def __post_init__(self) -> None:
        if not isinstance(self.window, WindowSpec):
            msg = f"window must be a WindowSpec (use WindowSpec.parse), got {self.window!r}"
            raise ConfigError(msg)
        for name in ("grace_ms", "watermark_delay_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                msg = f"{name} must be an integer >= 0 ms, got {value!r}; e.g. --grace 10s"
                raise ConfigError(msg)
        if not isinstance(self.aggs, AggList):
            msg = f"aggs must be an AggList, got {self.aggs!r}; use AggList.parse(\"count,sum\")"
            raise ConfigError(msg)
        self.aggs.check("aggs")
        if self.mode not in MODES:
            msg = f"mode must be revision or watermark, got {self.mode!r}"
            raise ConfigError(msg)
        if not isinstance(self.query_id, str) or not self.query_id.strip():
            msg = f"query_id must be a non-empty string, got {self.query_id!r}"
            raise ConfigError(msg)
        self._check_emit_policy()

    def _check_emit_policy(self) -> None:
        f, every = self.emit_min_change, self.emit_every_ms
        if f is not None and (isinstance(f, bool) or not isinstance(f, int | float)
                              or not math.isfinite(f) or f < 0):
            msg = (f"--emit-min-change must be a number >= 0 (a relative change: 0.1 = 10 %), "
                   f"got {f!r}; e.g. --emit-min-change 0.1")
            raise ConfigError(msg)
        if every is not None and (isinstance(every, bool) or not isinstance(every, int)
                                  or every <= 0):
            msg = (f"--emit-every must be a duration > 0 (of watermark progress), got "
                   f"{every!r} ms; e.g. --emit-every 10s")
            raise ConfigError(msg)
        if f is not None:
            object.__setattr__(self, "emit_min_change", float(f))
        if self.mode == "watermark" and self.emit_policy is not None:
            given = [o for o, v in (("--emit-min-change", f), ("--emit-every", every))
                     if v is not None]
            opts, verb = " and ".join(given), "apply" if len(given) > 1 else "applies"
            msg = (f"{opts} {verb} to --mode revision only: watermark mode emits exactly one "
                   "FINAL per window and nothing before it, so there are no EARLY/LATE "
                   f"revisions to thin out; drop {opts} or run with --mode revision")
            raise ConfigError(msg)
