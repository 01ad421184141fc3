"""Percentile and distinct-count sketches that revise can revise.

Both keep their per-window state in a :class:`~windows.slots.SlotTable` (ragged ``(slot,
value)`` pairs per group, CSR form), updated for many windows at once from ``(group ids,
values)`` arrays and merged exactly, so a FINAL equals the sketch of the window's accepted
records computed in one pass, whatever the arrival order and split into micro-batches.

- :class:`QuantileSketch` (``pNN(field)``): DDSketch-style log buckets, 1 % relative error.
- :class:`DistinctSketch` (``distinct(field)``): exact hash set up to 16,384 values, then a
  HyperLogLog with p = 14 (0.81 % standard error); values hashed by :func:`hash_values`.

Pure numpy + stdlib, like the rest of ``windows``.
"""

from __future__ import annotations

from windows.distinct import (
    DistinctSketch,
    hash_numbers,
    hash_strings,
    hash_utf8,
    hash_values,
    mix64,
)
from windows.quantiles import QuantileSketch, percentile_rank
from windows.slots import EncodedSketch, SlotTable, build, merge, regroup

__all__ = [
    "DistinctSketch",
    "EncodedSketch",
    "QuantileSketch",
    "SlotTable",
    "build",
    "hash_numbers",
    "hash_strings",
    "hash_utf8",
    "hash_values",
    "merge",
    "mix64",
    "percentile_rank",
    "regroup",
]
