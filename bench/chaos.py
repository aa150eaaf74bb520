#!/usr/bin/env python3
"""`python bench/chaos.py ...`: the command of the package bench/chaos/ (its options: bench/chaos/cli.py).
This file is only run, never imported (`bench.chaos` is the package)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.chaos.cli import main

if __name__ == "__main__":
    sys.exit(main())
