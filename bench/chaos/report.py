"""The campaign's report (bench/chaos.py): the result from the faults and the ledgers' end (the per-kind
summary and the verdict: bench/chaos/faults.py), written to the work dir and printed (table, totals,
ONE JSON line last with --json)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.chaos import faults as cf

if TYPE_CHECKING:
    from bench.chaos.stack import CampaignBase


def campaign_result(
    c: CampaignBase,
    end: dict[str, Any],
    rounds: int,
    quick: bool,
    kinds: frozenset[str],
    not_applicable: tuple[str, ...],
    t_start: float,
    selected: bool = False,
) -> dict[str, Any]:
    """`c` the Campaign after its rounds, `end` what its finish() found; `selected`: --kinds chose the
    kinds (the target is then every selected kind injected once a round, not the campaign's)."""
    eos, alo = end["eos"], end["alo"]
    lost = eos["lost"] + alo["lost"] if end["caught_up"] else None
    result = cf.summary(
        c.faults,
        lost,
        eos["duplicated"],
        alo["duplicated"],
        {
            "rounds": rounds,
            "quick": quick,
            "caught_up": end["caught_up"],
            "produced": sum(end["ends"].values()),
            "produced_acked": sum(c.producer.acked.values()),
            "produce_errors": len(c.producer.errors),
            # aborted_transactions: the offsets a read_committed reader sees (what had to be delivered), else absent
            **({"visible": end["visible"]} if "visible" in end else {}),
            "eos": {
                k: eos[k]
                for k in ("produced", "delivered", "distinct", "lost", "duplicated", "outside", "runs")
                if k in eos
            },
            "alo": {
                k: alo[k]
                for k in ("produced", "delivered", "distinct", "lost", "duplicated", "outside", "runs")
                if k in alo
            },
            "warm_runtime": c.warm,
            "pods": "node",
            "not_applicable": list(not_applicable),
            "runtime_waits": c.runtime_waits,
            "eos_table_keyless": c.eos_keyless,
            "operator_restarts": c.op.gen - 1,
            "repairs": c.repairs,
            "fired_all_confirmed": all(f.at is not None and bool(f.evidence) for f in c.faults if f.fired),
            "fired": cf.confirmations(c.faults),  # per confirmed fault: what confirmed it (scalars)
            "wall_s": round(time.time() - t_start, 1),
            "workdir": str(c.workdir),
            "faults_detail": [f.to_dict() for f in c.faults],
        },
    )
    # the targets (issue 12: >= 30 faults over >= 8 kinds; issue 23: >= 40 over >= 20, which takes
    # --warm-runtime: 3 kinds need the runtime) (the quick CI run: its own kinds), every kind of the run
    # (the full campaign's: all of cf.KINDS, the busy drains' too) fired at least once, all recovered,
    # 0 lost/duplicated
    result["problems"] = cf.verdict(
        result,
        *((len(kinds), len(kinds)) if quick else (len(kinds) * rounds, len(kinds)) if selected else (40, 20)),
        wanted=kinds,
    )
    return result


def report(result: dict[str, Any], workdir: Path, as_json: bool) -> None:
    (workdir / "result.json").write_text(json.dumps(result, indent=1))
    print(cf.table(result["per_kind"], result.get("not_applicable") or ()))
    print(
        f"faults {result['faults']} over {result['kinds']} kinds, recovered {result['recovered']}, not fired "
        f"{result['not_fired']}; lost {result['lost']}, duplicated {result['duplicated']} (exactly-once sink), "
        f"replayed {result['replayed']} (at-least-once handler); produced {result['produced']}; "
        f"wall {result['wall_s']} s; details {workdir / 'result.json'}"
    )
    if as_json:
        print(json.dumps({k: v for k, v in result.items() if k != "faults_detail"}))
