"""`lagpilot demo`: the local demo (lagpilot_dev.demo.run; docs/demo.md). Its modules: run (the
command), config (the CR, names, profiles), cluster, node (the real node), operator (--no-operator's bare consumer), traffic, observe,
loop, measure, report, proof, summary, table, plot, view, console, keep, and handler (the handler the
CR runs, `lagpilot_dev.demo.handler:process`).

This module imports nothing: the demo image (dev/demo_image/Dockerfile) carries it with the handler
alone, so importing the handler must not import the demo's dependencies. `main` (the
`lagpilot.subcommands` entry point `lagpilot_dev.demo:main`) imports the command on call."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """`lagpilot demo` (lagpilot_dev.demo.run.main)."""
    from lagpilot_dev.demo.run import main as run_main

    return run_main(argv)
