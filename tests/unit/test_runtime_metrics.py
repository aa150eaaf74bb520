"""Capacity estimation, the commit metadata string, probes and the metrics endpoint."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from lagpilot_runtime.metrics import CapacityEstimator, ConsumerMetrics, Health, MetricsServer


def test_capacity_of_full_batches_is_records_per_busy_second():
    est = CapacityEstimator(max_records=500)
    for _ in range(5):
        est.observe(500, 0.25)
    assert est.capacity() == pytest.approx(2000)


def test_capacity_extrapolates_small_batches_to_a_full_one():
    # fixed 20 ms per call + 0.1 ms per record; an idle consumer sees small batches
    est = CapacityEstimator(max_records=500)
    for n in (3, 10, 25, 7, 40, 60):
        est.observe(n, 0.020 + 0.0001 * n)
    expected = 500 / (0.020 + 0.0001 * 500)
    assert est.capacity() == pytest.approx(expected, rel=0.01)
    naive = sum((3, 10, 25, 7, 40, 60)) / sum(0.020 + 0.0001 * n for n in (3, 10, 25, 7, 40, 60))
    assert est.capacity() > 3 * naive


@pytest.mark.parametrize(
    "samples",
    [
        [(10, 0.1)],
        [(10, 0.1), (10, 0.2)],
        [(10, 0.3), (20, 0.2), (40, 0.1)],
    ],
    ids=["one-sample", "same-size", "negative-slope"],
)
def test_capacity_falls_back_to_the_plain_ratio(samples):
    est = CapacityEstimator(max_records=500, first_is_setup=False)  # the fit's fallback, not the set-up
    for n, b in samples:
        est.observe(n, b)
    assert est.capacity() == pytest.approx(sum(n for n, _ in samples) / sum(b for _, b in samples))


def test_capacity_window_forgets_old_batches():
    est = CapacityEstimator(max_records=100, window=5)
    for _ in range(5):
        est.observe(100, 1.0)
    for _ in range(5):
        est.observe(100, 0.1)
    assert est.capacity() == pytest.approx(1000)


def test_capacity_unknown_without_samples():
    assert CapacityEstimator(max_records=10).capacity() is None


def test_liveness_goes_stale_without_progress():
    now = [100.0]
    h = Health(stale_after_s=60, clock=lambda: now[0])
    assert h.live()[0]
    now[0] += 61
    assert not h.live()[0]
    h.progress()
    assert h.live()[0]


@pytest.mark.parametrize(
    "member, connected, stopping, ok",
    [
        (False, True, False, False),
        (True, False, False, False),
        (True, True, True, False),
        (True, True, False, True),
    ],
    ids=["not-member", "disconnected", "stopping", "ready"],
)
def test_readiness(member, connected, stopping, ok):
    h = Health(stale_after_s=60, member=member, connected=connected, stopping=stopping)
    assert h.ready()[0] is ok


def test_http_endpoints():
    m = ConsumerMetrics()
    m.records.inc(7)
    m.committed_offset.labels("t", "0").set(42)
    h = Health(stale_after_s=60, member=True, connected=True, assigned=1)
    server = MetricsServer(m, h, 0, host="127.0.0.1").start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        body = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
        assert "lagpilot_consumer_records_processed_total 7.0" in body
        assert 'lagpilot_consumer_committed_offset{partition="0",topic="t"} 42.0' in body
        assert json.loads(urllib.request.urlopen(f"{base}/readyz", timeout=10).read())["ok"] is True
        h.connected = False
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{base}/readyz", timeout=10)
        assert info.value.code == 503
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{base}/nope", timeout=10)
        assert info.value.code == 404
    finally:
        server.stop()


def test_forget_partition_drops_its_series():
    m = ConsumerMetrics()
    m.lag.labels("t", "3").set(5)
    m.forget_partition("t", 3)
    m.forget_partition("t", 3)  # idempotent
    assert all(s.labels.get("partition") != "3" for metric in m.lag.collect() for s in metric.samples)


def test_a_fatal_client_error_fails_liveness_at_once():
    # chaos finding: a consumer fenced as a static member blocked in the client with /healthz at 200
    h = Health(stale_after_s=60, clock=lambda: 100.0)
    assert h.live()[0]
    h.fatal = "fatal Kafka error: Static consumer fenced by other consumer with same group.instance.id"
    ok, detail = h.live()
    assert not ok and "fenced" in detail["fatal"]
