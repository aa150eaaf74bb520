"""Stage 7: the summary (summary.json), the plot, the trace replayed (trace.csv), every sample
(samples.jsonl), the simulator's view of the same trace, and the printed verdict."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagpilot_dev.demo import plot as demo_plot
from lagpilot_dev.demo import proof as demo_proof
from lagpilot_dev.demo import report as demo_report
from lagpilot_dev.demo import table as demo_table
from lagpilot_dev.demo import traffic as demo_traffic
from lagpilot_dev.demo.config import RunNames, spec_settings
from lagpilot_dev.demo.console import Console
from lagpilot_dev.demo.report import Proof, Sample
from lagpilot_dev.demo.traffic import Producer, Profile

log = logging.getLogger("lagpilot_dev.demo")


@dataclass(frozen=True)
class OutputPaths:
    """The files stage 7 writes, all under the run's output directory."""

    out: Path

    @property
    def plot(self) -> Path:
        return self.out / "demo.png"

    @property
    def summary(self) -> Path:
        return self.out / "summary.json"

    @property
    def trace(self) -> Path:
        return self.out / "trace.csv"

    @property
    def samples(self) -> Path:
        return self.out / "samples.jsonl"

    def as_summary(self) -> dict[str, str]:
        """The summary's "paths"."""
        return {
            "plot": str(self.plot),
            "summary": str(self.summary),
            "samples": str(self.samples),
            "trace": str(self.trace),
            "operator_log": str(self.out / "operator.log"),
            "demo_log": str(self.out / "demo.log"),
            "manifest": str(self.out / "bcg.yaml"),
        }


def simulate(trace_path: Path, summary: dict[str, Any]) -> None:
    """What the calibrated simulator says about this run's trace: static replicas and KEDA (the
    load needs drains when they stay low) and lagpilot's prediction next to the measurement."""
    from lagpilot.sim import compare as sim_compare
    from lagpilot.sim import trace as sim_trace

    trace = sim_trace.load_trace(str(trace_path))
    summary["baselines"] = sim_compare.baselines(trace, summary)
    params, _, unknown = sim_compare.params_from_summary(summary)
    pred = sim_compare.predict(trace, params, ("lagpilot",))["lagpilot"].to_dict()
    rows = sim_compare.compare(pred, sim_compare.measured_from_summary(summary))
    summary["sim_to_real"] = {
        "comparison": {r["metric"]: r for r in rows},
        "agrees": sim_compare.agrees(rows),
        "not_modelled": unknown,
    }
    runtime = sim_compare.runtime_comparison(pred, summary)
    if runtime is not None:  # the runtime on demand: its minutes serving no drain, shown not judged
        summary["sim_to_real"]["runtime"] = runtime


def report(
    console: Console,
    names: RunNames,
    profile: Profile,
    *,
    pg: Any,
    samples: Sequence[Sample],
    producer: Producer | None,
    operator_restarts: int,
    operator_exit_codes: list[int],
    node: dict[str, Any] | None = None,
) -> int:
    """Stage 7; the exit status: 0 when the proof holds, 1 when it fails."""
    t0 = console.begin(7, "Summary, plot and proof", "the SQL checks")
    proof = demo_proof.proof(
        pg,
        names,
        partitions=profile.partitions,
        sla_s=profile.sla_s,
        end=samples[-1].end if samples else {},
        produced=producer.acked if producer else 0,
    )
    paths = OutputPaths(names.out)
    console.timings["total"] = console.elapsed()
    wall0 = producer.wall0 if producer else None
    summary = demo_report.summarize(
        samples,
        proof,
        profile=profile.name,
        sla_s=profile.sla_s,
        batch_max_records=profile.batch_max_records,
        partitions=profile.partitions,
        timings=console.timings,
        paths=paths.as_summary(),
        batches=demo_proof.ledger_batches(pg, names, wall0),
        wall0=wall0,
        spec=spec_settings(profile),
    )
    summary.update(
        namespace=names.ns,
        name=names.name,
        topic=names.topic,
        table=names.table,
        ledger_table=names.ledger_table,
        operator_restarts=operator_restarts,
        operator_exit_codes=operator_exit_codes,
        producer_error=producer.error if producer else None,
        load_average=list(os.getloadavg()),
    )
    if node is not None:  # --node: which pods ran as containers (lagpilot_dev.demo.node)
        from lagpilot_dev.demo.node import cpu_window, drain_cpu

        drain_cpu(node, summary["drains"])
        if wall0 is not None:  # the node's CPU over the replay and the catch-up
            end = wall0 + float(summary.get("observed_seconds") or 0)
            node["cpu_during_run"] = cpu_window(
                node.get("cpu_samples") or [], wall0, end, int(node.get("cpus") or 1)
            )
        summary["node"] = node
    # the exact trace replayed, one row a second from the replay's start to the last observation
    demo_traffic.write_trace(
        paths.trace,
        demo_traffic.trace_rows(producer.sent_per_second if producer else {}, summary["observed_seconds"]),
        demo_traffic.trace_weights(producer.sent_by_partition, profile.partitions) if producer else None,
    )
    summary["sim_command"] = f".venv/bin/lagpilot simulate --trace {paths.trace} --from-demo {paths.summary}"
    try:
        simulate(paths.trace, summary)
    except Exception as exc:  # noqa: BLE001 - the simulator's view is extra; the proof stands alone
        summary["baselines"] = None
        console.say(f"simulator comparison skipped: {exc!r}", indent=True)
        log.warning("simulator comparison failed", extra={"error": repr(exc)[:500]})
    try:
        demo_plot.plot(
            samples,
            str(paths.plot),
            sla_s=profile.sla_s,
            title=f"lagpilot demo ({profile.name}): {names.topic}, SLA {profile.sla_s} s",
            drains=summary["drains"],
        )
    except Exception as exc:  # noqa: BLE001 - a missing matplotlib must not hide the proof
        summary["paths"]["plot"] = None
        console.say(f"plot skipped: {exc!r}", indent=True)
    paths.summary.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    with open(paths.samples, "w") as fh:  # every observation, for a post-mortem or a re-plot
        for smp in samples:
            fh.write(json.dumps(dataclasses.asdict(smp), default=str) + "\n")
    console.timings["report"] = time.monotonic() - t0
    print_report(console, names, summary, proof, paths)
    return 0 if proof.ok else 1


def print_report(
    console: Console, names: RunNames, summary: dict[str, Any], proof: Proof, paths: OutputPaths
) -> None:
    """The summary table, the SQL behind the proof, the simulator's comparison, the verdict, the files."""
    print()
    print(demo_table.format_summary(summary))
    print()
    print(
        f'  SQL: SELECT count(*), count(DISTINCT (topic, partition, "offset")) FROM {names.table}'
        f"  →  {proof.rows_in_sink:,} rows, {proof.distinct_in_sink:,} distinct"
    )
    if proof.ledger is not None:
        print(
            f'  SQL: SELECT count(*), count(DISTINCT (partition, "offset")) FROM {names.ledger_table}'
            f"  →  {proof.ledger['delivered']:,} deliveries, {proof.ledger['distinct']:,} distinct records "
            f"(ledger: no key, one row per delivery)"
        )
    s2r = summary.get("sim_to_real") or {}
    if s2r.get("comparison"):
        from lagpilot.sim.compare import format_comparison

        print("\n  the calibrated simulator on this run's trace (lagpilot predicted vs measured):")
        print(
            "\n".join(
                "    " + line for line in format_comparison(list(s2r["comparison"].values())).splitlines()
            )
        )
        if s2r.get("runtime"):
            from lagpilot.sim.compare import format_runtime

            print(f"    {format_runtime(s2r['runtime'])}")
        print(f"    {summary['sim_command']}")
    verdict = (
        "PROOF OK: produced = distinct records in PostgreSQL "
        f"({proof.produced:,}), every partition holds offsets 0..end-1, and the delivery ledger shows "
        f"each delivered exactly once (lost {proof.lost}, delivered more than once {proof.delivered_twice})"
    )
    if not proof.ok:
        verdict = "PROOF FAILED: " + "; ".join(proof.failures())
    print(f"\n  {verdict}\n")
    if summary["paths"].get("plot"):
        print(f"  plot:    {paths.plot}")
    print(f"  summary: {paths.summary}")
    out = names.out
    node = summary.get("node")
    if node is not None:
        verdict = "yes" if node["every_pod_a_container"] else "NO"
        print(
            f"  on the node {node['node']}: every lagpilot pod a container: {verdict} ({node['pods_started']} pods "
            f"started, {node['pods_with_containers']} seen in the runtime's listing, "
            f"{len(node['containers'])} containers; without one: {node['pods_without_containers'] or 'none'}; "
            f"elsewhere: {node['pods_on_other_nodes'] or 'none'}); operator release {node['operator_release']}"
        )
    print(f"  logs:    {out}/operator.log, {out}/demo.log, pods in {out}/pods")
    print(f"  demo wall time {console.elapsed():.0f} s (stack up {console.timings.get('stack_up', 0):.0f} s)")
