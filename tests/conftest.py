"""Shared pytest configuration.

Fixtures for the real parts live in tests/fixtures/ (one module per concern) and are started lazily
through the dev stack, so unit tests run with no real part installed.
"""
pytest_plugins = [
    "tests.fixtures.stack",  # Kafka, PostgreSQL, Spark jars (session-scoped)
    "tests.fixtures.kube",   # etcd + kube-apiserver + controller-manager, pod runner
]
