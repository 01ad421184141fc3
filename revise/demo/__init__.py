"""``revise demo``: the whole pipeline end to end on embedded defaults (:mod:`revise.demo.run`)."""

from __future__ import annotations

from revise.demo.run import run_demo

__all__ = ["run_demo"]
