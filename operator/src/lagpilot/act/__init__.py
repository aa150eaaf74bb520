"""Kubernetes: manifests, the drain executor, API calls (docs/architecture.md)."""
