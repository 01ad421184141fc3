"""Argument coercions shared by the CLI's subcommands (``revise.cli``, ``revise.compare``).

Values may arrive typed (from argparse ``type=``) or as text (from ``REVISE_<OPTION>``
environment defaults, which argparse does not convert); these accept both.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from revise.config import parse_duration
from revise.errors import ConfigError

__all__ = ["duration_type", "maybe_duration", "maybe_float", "maybe_int"]


def duration_type(option: str) -> Callable[[str], int]:
    """An argparse ``type=`` that parses ``500ms``/``10s``/``5m``/``1h`` into ms."""

    def parse(text: str) -> int:
        try:
            return parse_duration(text, option=option)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    return parse


def maybe_duration(v: Any, option: str) -> int | None:
    """None, ms as int, or duration text → ms (ConfigError on bad text)."""
    if v is None or isinstance(v, int):
        return v
    return parse_duration(str(v), option=option)


def maybe_int(v: Any, option: str) -> int | None:
    """None, an int, or integer text → int (ConfigError on bad text)."""
    if v is None or isinstance(v, int):
        return v
    try:
        return int(v)
    except ValueError:
        msg = f"{option} must be an integer, got {v!r}"
        raise ConfigError(msg) from None


def maybe_float(v: Any, option: str) -> float | None:
    """None, a float, or number text → float (ConfigError on bad text)."""
    if v is None or isinstance(v, float):
        return v
    try:
        return float(v)
    except ValueError:
        msg = f"{option} must be a number, got {v!r}"
        raise ConfigError(msg) from None
