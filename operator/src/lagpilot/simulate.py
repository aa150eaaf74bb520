"""`lagpilot simulate`: replay a produce-rate trace through the policies (work in progress)."""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point of `lagpilot simulate` (see issue 5 and docs/decision.md)."""
    raise NotImplementedError("simulator under construction")
