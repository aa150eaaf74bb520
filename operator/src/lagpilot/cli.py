"""The `lagpilot` command: one entry point, subcommands dispatched lazily so that
`lagpilot consume` in the consumer image never imports kopf, and `lagpilot simulate` never imports Kafka.

Other distributions add subcommands through the entry-point group ``lagpilot.subcommands`` (the dev
tooling, dev/pyproject.toml, adds `dev` and `demo`): the operator package names no dev code, and
an image without the dev distribution simply has no such subcommand.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points

# subcommand -> "module:function"; each function takes argv (list[str]) and returns an exit code
SUBCOMMANDS: dict[str, str] = {
    "consume": "lagpilot_runtime.consumer:main",
    "drain": "lagpilot_runtime.drain.job:main",
    "operator": "lagpilot.run:main",
    "simulate": "lagpilot.sim.cli:main",
}
PLUGIN_GROUP = "lagpilot.subcommands"


def subcommands() -> dict[str, str]:
    """The built-in subcommands plus those other installed distributions register."""
    found = {ep.name: ep.value for ep in entry_points(group=PLUGIN_GROUP)}
    return {**found, **SUBCOMMANDS}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = SUBCOMMANDS if argv and argv[0] in SUBCOMMANDS else subcommands()
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        names = ", ".join(sorted(commands))
        print(f"usage: lagpilot {{{names}}} [args...]", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module_name, func_name = commands[argv[0]].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
