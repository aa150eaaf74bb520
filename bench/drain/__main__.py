"""`python -m bench.drain`: the same command as `python bench/drain.py`."""

import sys

from bench.drain.cli import main

sys.exit(main())
