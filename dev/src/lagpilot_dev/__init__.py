"""lagpilot_dev: the local real-parts stack, the real node among them. Dev tooling only."""
