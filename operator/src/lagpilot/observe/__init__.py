"""Kafka observation: client config, shared clients, offsets, topics (docs/architecture.md)."""
