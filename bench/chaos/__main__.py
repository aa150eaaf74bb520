"""`python -m bench.chaos`: the same command as `python bench/chaos.py`."""

import sys

from bench.chaos.cli import main

sys.exit(main())
