"""``python -m revise`` — the command line (see :mod:`revise.cli`)."""

from __future__ import annotations

import sys

from revise.cli import main

if __name__ == "__main__":
    sys.exit(main())
