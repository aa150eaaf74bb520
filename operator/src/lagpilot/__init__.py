"""lagpilot: the operator, its pure decision core, the simulator and the CLI."""

__version__ = "0.1.0"
