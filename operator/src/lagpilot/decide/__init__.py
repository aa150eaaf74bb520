"""Pure decisions: no I/O, `now` passed in (docs/architecture.md)."""
