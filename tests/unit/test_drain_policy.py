"""When a drain is needed, of which partitions, and the regrowing hot partition: table-driven."""
from __future__ import annotations

import json

import pytest

from lagpilot.drain_policy import DrainPolicy, drain_need
from lagpilot.projection import PartitionLoad

C = 100.0  # records/s per consumer (and per drain task by default)
TARGET, SLA = 480.0, 600.0
DP = DrainPolicy(start_up_s=60, min_backlog_records=10_000, split_factor=4, max_tasks=16, min_interval_s=60)


def L(*rows: tuple[float, float]) -> list[PartitionLoad]:
    return [PartitionLoad(i, lag, rate, 1000 * i, 1000 * i + int(lag)) for i, (lag, rate) in enumerate(rows)]


CASES = [
    # id, loads, kwargs, policy, expected partitions (None: no drain), reason
    ("group-copes", L((1000, 10), (1000, 10), (1000, 10)), {}, DP, None, None),
    ("capped-backlog-one-partition", L((200_000, 10), (1000, 10), (1000, 10)), {}, DP, (0,), "HotPartition"),
    ("capped-backlog-every-partition", L((30_000, 10), (30_000, 10), (30_000, 10)), {"group_replicas": 1}, DP,
     (0, 1), "PartitionCapReached"),
    ("below-min-backlog", L((9_000, 99.9), (0, 0)), {}, DP, None, None),
    ("disabled", L((200_000, 10), (0, 0)), {}, DrainPolicy(enabled=False), None, None),
    ("one-already-running", L((200_000, 10), (0, 0)), {"drain_active": True}, DP, None, None),
    ("too-soon-after-last", L((200_000, 10), (0, 0)), {"last_drain_end_s": 970.0}, DP, None, None),
    ("interval-elapsed", L((200_000, 10), (0, 0)), {"last_drain_end_s": 900.0}, DP, (0,), "HotPartition"),
    ("drain-no-faster-than-group", L((60_000, 0), (0, 0)), {"target_s": 100.0}, DrainPolicy(start_up_s=3000), None, None),
    ("capacity-unknown", L((200_000, 10), (0, 0)), {"capacity": None}, DP, None, None),
    ("regrowing-not-yet-due", L((12_000, 150), (0, 1)), {}, DP, None, None),
    ("regrowing-due", L((40_000, 150), (0, 1)), {}, DP, (0,), "RegrowingPartition"),
    ("regrowing-due-by-measured-age", L((12_000, 150), (0, 1)), {"oldest_age_s": {0: 400.0}}, DP, (0,),
     "RegrowingPartition"),
    ("task-budget", L((200_000, 10), (200_000, 10), (200_000, 10)), {}, DrainPolicy(max_tasks=6, split_factor=4,
                                                                                    start_up_s=60), (0, 1), "HotPartition"),
]


@pytest.mark.parametrize("loads,kwargs,policy,parts,reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_drain_need(loads, kwargs, policy, parts, reason) -> None:  # type: ignore[no-untyped-def]
    args = dict(capacity=C, group_replicas=len(loads), target_s=TARGET, sla_s=SLA, policy=policy, now_s=1000.0)
    args.update(kwargs)
    capacity = args.pop("capacity")
    need = drain_need(loads, capacity, **args)
    if parts is None:
        assert need is None
        return
    assert need is not None and need.partitions == parts and need.reason == reason
    assert need.tasks <= policy.max_tasks
    for r in need.ranges:
        load = loads[r.partition]
        assert (r.start, r.end, r.records) == (load.start_offset, load.end_offset, int(load.lag))
        assert r.expected_s < r.group_would_need_s
        assert r.records >= policy.min_backlog_records
    json.dumps(need.to_dict())


def test_task_budget_split() -> None:
    need = drain_need(L((200_000, 10), (200_000, 10), (200_000, 10)), C, group_replicas=3, target_s=TARGET,
                      sla_s=SLA, policy=DrainPolicy(max_tasks=6, split_factor=4), now_s=0)
    assert need is not None and [r.tasks for r in need.ranges] == [4, 2]


def test_expected_time_uses_task_capacity() -> None:
    need = drain_need(L((100_000, 0), (0, 0)), C, group_replicas=2, target_s=TARGET, sla_s=SLA,
                      policy=DrainPolicy(start_up_s=50, split_factor=4, task_capacity=250.0), now_s=0)
    assert need is not None and need.expected_s == pytest.approx(50 + 100_000 / (4 * 250))


def test_hot_partition_drained_repeatedly() -> None:
    """A partition at 150/s against 100/s consumers regrows after each drain: the policy asks again
    once the previous drain ended, the interval passed and the backlog is due."""
    t, lag, last_end, drains = 0.0, 0.0, None, []
    running_until = None
    while t < 3600:
        active = running_until is not None and t < running_until
        if running_until is not None and not active:
            last_end, running_until = running_until, None
        need = drain_need([PartitionLoad(0, lag, 150.0), PartitionLoad(1, 0, 5.0)], C, group_replicas=2,
                          target_s=TARGET, sla_s=SLA, policy=DP, now_s=t, drain_active=active,
                          last_drain_end_s=last_end)
        if need is not None:
            drains.append(t)
            running_until = t + need.expected_s
            lag = 0.0  # handed off: the group resumes at the split
        lag += (150.0 - C) * 15
        t += 15
    assert len(drains) >= 5
    gaps = [b - a for a, b in zip(drains, drains[1:])]
    assert min(gaps) >= DP.start_up_s + DP.min_interval_s


def test_from_spec() -> None:
    pol = DrainPolicy.from_spec({"drain": {"enabled": True, "splitFactor": 8, "maxTasks": 32,
                                           "minBacklogRecords": 5}}, start_up_s=45)
    assert (pol.split_factor, pol.max_tasks, pol.min_backlog_records, pol.start_up_s) == (8, 32, 5, 45)
    assert not DrainPolicy.from_spec({"drain": {"cancel": True}}).enabled
    assert DrainPolicy.from_spec({}) == DrainPolicy()
    with pytest.raises(ValueError):
        DrainPolicy.from_spec({"drain": {"splitFactor": 0}})
