"""lagpilot_dev: the local real-parts stack and the test-side pod runner. Dev tooling only."""
