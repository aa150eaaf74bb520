#!/usr/bin/env python3
"""`python bench/drain.py ...`: the command of the package bench/drain/ (its options: bench/drain/cli.py).
This file is only run, never imported (`bench.drain` is the package)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.drain.cli import main

if __name__ == "__main__":
    sys.exit(main())
