"""Shared pytest configuration.

Fixtures for the real parts live in tests/fixtures/ (one module per concern) and are started lazily
through the dev stack, so unit tests run with no real part installed.
"""

from hypothesis import settings

# no per-example deadline (hypothesis's default is 200 ms): properties assert what the code computes,
# never how fast, and a loaded machine would break a deadline (tests/unit/test_hypothesis_profile.py)
settings.register_profile("lagpilot", deadline=None)
settings.load_profile("lagpilot")

pytest_plugins = [
    "tests.fixtures.stack",  # Kafka, PostgreSQL, Spark jars (session-scoped)
    "tests.fixtures.kube",  # etcd + kube-apiserver + controller-manager
    "tests.fixtures.node",  # the real node (default; LAGPILOT_NODE=0 opts out), its images, `pods`
]


def pytest_report_header(config: object) -> str:
    """Say at the top of every run whether the real node is in it (docs/node.md): an opt-out is
    never silent."""
    import os

    from tests.fixtures.node import netpol_gate, node_gate

    verdict, why = node_gate(os.environ)
    node = "on (pods run as containers on the real node)" if verdict == "on" else f"OFF: {why}"
    verdict, why = netpol_gate(os.environ)
    netpol = "on" if verdict == "on" else f"OFF: {why}"
    return f"lagpilot real node: {node}; NetworkPolicy agent: {netpol}"


def pytest_collection_modifyitems(session: object, config: object, items: list) -> None:  # type: ignore[type-arg]
    """Under pytest-xdist (./dev/test): longest test files first (tests/schedule.py), so the short
    ones fill the end and no long scenario starts last. A run in one process keeps file order."""
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from tests.schedule import load, longest_files_first

    order = longest_files_first([i.nodeid for i in items], load())
    items[:] = [items[i] for i in order]
