"""The policy simulator, `lagpilot simulate` (docs/architecture.md)."""
