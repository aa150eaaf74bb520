"""`lagpilot dev images`: the container images built from the real Dockerfiles and run
(docs/images.md). command (the command, the steps in order: `build_and_run`, `main`) and a module per
step: tools, base, build (with digest: the content tags), run, prune.

This module imports nothing, so that a step's module (e.g. tools, which node.py and netpol.py use)
is imported without the others, and no function of a step shadows a step's module name."""
