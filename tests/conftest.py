"""Shared pytest configuration.

Fixtures for the real parts live in tests/fixtures/ (one module per concern) and are started lazily
through the dev stack, so unit tests run with no real part installed.
"""

pytest_plugins = [
    "tests.fixtures.stack",  # Kafka, PostgreSQL, Spark jars (session-scoped)
    "tests.fixtures.kube",  # etcd + kube-apiserver + controller-manager, pod runner
    "tests.fixtures.node",  # the real node (LAGPILOT_NODE=1), its images, `pods`: runner or node
]


def pytest_collection_modifyitems(session: object, config: object, items: list) -> None:  # type: ignore[type-arg]
    """Under pytest-xdist (./dev/test): longest test files first (tests/schedule.py), so the short
    ones fill the end and no long scenario starts last. A run in one process keeps file order."""
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from tests.schedule import load, longest_files_first

    order = longest_files_first([i.nodeid for i in items], load())
    items[:] = [items[i] for i in order]
