"""Built-in sinks; each exposes process(records, ctx) per the handler contract."""
