"""The words revise's modules share, each defined once: modes, timings, names, limits.

Every module that needs one of these imports it from here (the engine, records, configs, the
CLI, the sinks and the tools), so a name cannot drift between two copies.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from revise.errors import ReviseError

__all__ = [
    "LATEST_KEY",
    "MAX_TS_MS",
    "MODES",
    "TABLE_NAMES",
    "TIMINGS",
    "VIEW_NAMES",
    "WINDOW_BOUNDS",
    "Mode",
    "Timing",
    "UnknownWord",
    "as_mode",
    "as_timing",
]

Mode = Literal["revision", "watermark"]
"""``revision``: every change, then a FINAL; ``watermark``: only the FINAL (SPEC §1)."""

Timing = Literal["EARLY", "LATE", "FINAL"]
"""A revision's timing (SPEC §4): EARLY ``W < end``, LATE ``end <= W < end + grace``, FINAL."""

MODES: Final[tuple[Mode, ...]] = get_args(Mode)
TIMINGS: Final[tuple[Timing, ...]] = get_args(Timing)

MAX_TS_MS: Final = 2**53
"""Event times must lie in ``[0, 2**53)`` epoch ms (SPEC §2); anything else is bad input."""

WINDOW_BOUNDS: Final = ("key", "window_start_ms", "window_end_ms")
"""One window of one query: the changelog's record key and the tools' window identity."""

LATEST_KEY: Final = ("query_id", *WINDOW_BOUNDS)
"""One window across queries: the key of the Delta ``latest`` table (its MERGE condition)."""

TABLE_NAMES: Final = ("revisions", "latest", "late", "dead_letter")
"""The Delta tables under ``--delta-path`` (SPEC §5)."""

VIEW_NAMES: Final = (
    "final_windows", "provisional_windows", "revision_history", "late_records", "dead_letters",
)
"""The SQL views users query over the Delta tables (SPEC §5, and ``dead_letters``)."""


class UnknownWord(ReviseError, ValueError):
    """A text that is not one of the vocabulary's words (a mode, a timing)."""


def as_mode(text: object) -> Mode:
    """``text`` as a :data:`Mode`.

    Raises:
        UnknownWord: ``text`` is not ``revision`` or ``watermark``.
    """
    for mode in MODES:
        if text == mode:
            return mode
    msg = f"mode must be revision or watermark, got {text!r}"
    raise UnknownWord(msg)


def as_timing(text: object) -> Timing:
    """``text`` as a :data:`Timing`.

    Raises:
        UnknownWord: ``text`` is not ``EARLY``, ``LATE`` or ``FINAL``.
    """
    for timing in TIMINGS:
        if text == timing:
            return timing
    msg = f"timing must be EARLY, LATE or FINAL, got {text!r}"
    raise UnknownWord(msg)
