"""lagpilot_runtime: the batch consumer, the handler contract, built-in sinks and the Spark drain job."""
