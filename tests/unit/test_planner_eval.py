"""The short version of the held-out planner campaign (bench/planner_eval.py): the issue's harsh
setting (flash, 6 partitions, SLA 300 s, pods 30 s, a 90 s drain start-up, <= 16 tasks) on the
seed where cold drains fall short, with cold drains and with the warm drain runtime on demand."""
from __future__ import annotations

from bench import planner_eval


def test_flash_s101_at_a_90s_start_up_needs_the_split_to_wait_for_spark() -> None:
    off, on_demand = (planner_eval.evaluate(["flash"], [101], [90.0], warm_runtime=mode)[0]
                      for mode in ("off", "on-demand"))
    # cold drains: the split is taken before each 90 s start-up and the worst records pay two
    assert off["within"] < 0.999 and not off["within_ok"]
    # on demand: one warm-up before the burst's first split, warm follow-ups
    assert on_demand["within"] >= 0.999 and on_demand["ok"]
    assert on_demand["p99"] < off["p99"]
    # the runtime's idle minutes are counted in the cost, which stays below the cold drains' and KEDA's
    assert on_demand["runtime_minutes"] > 0 and off["runtime_minutes"] == 0
    assert on_demand["cost"] < off["cost"] <= on_demand["keda_cost"]
