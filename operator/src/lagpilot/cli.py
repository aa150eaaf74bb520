"""The `lagpilot` command: one entry point, subcommands dispatched lazily so that
`lagpilot consume` in the consumer image never imports kopf, and `lagpilot simulate` never imports Kafka."""
from __future__ import annotations

import importlib
import sys

# subcommand -> "module:function"; each function takes argv (list[str]) and returns an exit code
SUBCOMMANDS: dict[str, str] = {
    "dev": "lagpilot_dev.cli:main",
    "consume": "lagpilot_runtime.consumer:main",
    "drain": "lagpilot_runtime.drain_job:main",
    "operator": "lagpilot.run:main",
    "simulate": "lagpilot.simulate:main",
    "demo": "lagpilot_dev.demo:main",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        names = ", ".join(SUBCOMMANDS)
        print(f"usage: lagpilot {{{names}}} [args...]", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module_name, func_name = SUBCOMMANDS[argv[0]].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
