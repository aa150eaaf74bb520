"""lagpilot vs the real KEDA on the same stack and the same trace (`bench/versus.py`, issue 27).

Each round replays the demo's profile once per variant, in alternating order (round 0 lagpilot
first, round 1 last, ...), each variant in a fresh namespace with its own topic, group, sink table
and delivery ledger:

- `lagpilot`: the demo's BatchConsumerGroup run by `lagpilot operator` (drains included), exactly as
  `lagpilot demo` runs it (its Demo stages, imported, not copied);
- each KEDA variant: the consumer Deployment the operator would render for that CR, alone
  (`versus_config.consumer_deployment`), scaled by a ScaledObject with a `kafka` trigger
  (`versus_config.scaled_object`), run by the dev stack's `keda` part (the real keda-operator and
  keda-metrics-apiserver) and kube-controller-manager's HPA controller.

Both run their pods on the real node, as the demo does (issue 24 step 6: the pod runner is gone): the
lagpilot variant is the demo's own node path (images, `helm install`); a KEDA variant loads the same
images and applies its Deployment (the demo image, the broker's PODS listener) in a namespace
labelled as the demo's, with no operator installed.

Both are measured by the demo's own code (`demo_observe.Observer` once a second, `demo_summary.report`:
the delivery ledger's exactly-once proof, produce -> sink latency, replica-minutes from the
Deployment's spec.replicas, scale events). For a KEDA run the model (`lagpilot.decide.keda` through
the simulator) predicts the run from its trace and its measured consumer capacity and pod start:
within-SLA, replica-minutes and the replica trajectory, side by side with what was measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagpilot_dev.demo import summary as demo_summary
from lagpilot_dev.demo.cluster import Cluster
from lagpilot_dev.demo.node import NODE_PARTS, NodeRun
from lagpilot_dev.demo.run import Demo
from lagpilot_dev.demo.run import parse_args as demo_parse_args
from lagpilot_dev.versus_config import (
    KedaVariant,
    Round,
    consumer_deployment,
    figures,
    medians,
    round_order,
    scaled_object,
)

log = logging.getLogger("lagpilot_dev.versus")

VERSUS_PARTS = (*NODE_PARTS, "keda")


class KedaCluster(Cluster):
    """The demo's cluster for a KEDA run: no CR; its "status" is what the HPA KEDA made reports."""

    def status(self) -> dict[str, Any]:
        from kubernetes import client

        n = self.names
        hpa = client.AutoscalingV2Api(self.api).read_namespaced_horizontal_pod_autoscaler(
            f"keda-hpa-{n.name}", n.ns
        )
        st = hpa.status
        metric = None
        for m in st.current_metrics or []:
            if m.external is not None and m.external.current is not None:
                metric = m.external.current.average_value or m.external.current.value
        return {
            "desiredReplicas": st.desired_replicas,
            "conditions": [
                {
                    "type": "Scaling",
                    "status": "True",
                    "message": f"HPA desired {st.desired_replicas}, external metric (average) {metric}",
                }
            ],
        }


class VariantRun(Demo):
    """One variant on the shared stack lease: the demo's stages without acquiring the stack."""

    def __init__(self, args: argparse.Namespace, stack: Any, info: Any, variant: KedaVariant | None) -> None:
        super().__init__(args)
        self.variant = variant
        if variant is not None:
            self.cluster = KedaCluster(self.console, self.names, VERSUS_PARTS, node=True)
            self.observer.cluster = self.cluster
        self.cluster.stack, self.cluster.info, self.cluster.lease = stack, info, None

    def stage_operator(self) -> None:
        if self.variant is None:
            super().stage_operator()
            return
        console, cluster = self.console, self.cluster
        t0 = console.begin(
            3,
            "The images on the node (no lagpilot operator: KEDA scales this Deployment)",
            "the images to be built and loaded",
        )
        self.node = NodeRun(console, self.names, cluster.info, cluster.kubectl, cluster.api)
        self.node.prepare_images(cluster.stack)
        self.node.start_sampler()
        console.done("operator_up", t0, f"images on node {self.node.node.info()['node_name']}")

    def stage_group(self) -> None:
        if self.variant is None:
            super().stage_group()
            return
        from kubernetes import client

        console, n, cluster, v = self.console, self.names, self.cluster, self.variant
        t0 = console.begin(
            4,
            f"Deployment {n.ns}/{n.deployment} + ScaledObject ({v.name}) → PostgreSQL table {n.table}",
            "KEDA to create the HPA",
        )
        # the broker's PODS listener on the node's bridge: the pods' way, which keda-operator (a host
        # process) reaches too
        boot = cluster.pods_bootstrap_servers()
        image = self.node.consumer_image if self.node is not None else None
        objs = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                consumer_deployment(n, self.profile, boot, image),
                scaled_object(n, self.profile, boot, v),
            ],
        }
        path = n.out / "keda.yaml"
        path.write_text(json.dumps(objs, indent=1) + "\n")
        cluster.kubectl("apply", "-f", str(path))
        console.say(f"$ kubectl apply -f {path}   ({v.describe()})", indent=True)
        autoscaling = client.AutoscalingV2Api(cluster.api)
        core = client.CoreV1Api(cluster.api)
        console.wait(
            lambda: autoscaling.read_namespaced_horizontal_pod_autoscaler(f"keda-hpa-{n.name}", n.ns),
            f"HPA keda-hpa-{n.name} (made by keda-operator)",
            120,
        )
        console.wait(
            lambda: any(p.status.phase == "Running" for p in core.list_namespaced_pod(n.ns).items),
            "a consumer pod in phase Running",
            120,
        )
        console.wait(self.observer.group_has_members, f"a member in consumer group {n.group_id}", 120)
        console.done("group_ready", t0, "consumer running, HPA present")

    def run_variant(self) -> dict[str, Any]:
        """The stages after the stack: resources, operator (or the images alone), group, replay,
        catch-up, report."""
        self.stage_resources()
        self.stage_operator()
        self.stage_group()
        self.loop.replay(self.cluster.info.bootstrap_servers)
        self.loop.catch_up()
        rc = demo_summary.report(
            self.console,
            self.names,
            self.profile,
            pg=self.cluster.pg,
            samples=self.observer.samples,
            producer=self.loop.producer,
            operator_restarts=self._operator_restarts(),
            operator_exit_codes=self._operator_exit_codes(),
        )
        summary = json.loads((self.names.out / "summary.json").read_text())
        summary["versus_exit"] = rc
        return summary


def model_check(summary: dict[str, Any], variant: KedaVariant, out: Path) -> dict[str, Any]:
    """The KEDA model's prediction of this KEDA run (its trace, its measured capacity and pod start,
    the variant's settings) next to the measurement: within-SLA, replica-minutes, the trajectory."""
    from lagpilot.sim import compare as sim_compare
    from lagpilot.sim import trace as sim_trace

    trace = sim_trace.load_trace(str(out / "trace.csv"))
    params, used, unknown = sim_compare.params_from_summary(summary)
    cfg = variant.model(params.min_replicas, params.max_replicas or params.partitions)
    from lagpilot.sim import policies as sim_policies

    # the series at the simulator's step, not its 60 s plot samples: the HPA acts every 15 s
    res = sim_policies.run_policy(trace, params, "keda", keda=cfg, sample_s=params.step_s)
    longer = sim_compare.padded(trace, 10 * params.sla_s)
    full = sim_policies.run_policy(longer, params, "keda", keda=cfg) if res.remaining > 0 else res
    pred = {**res.to_dict(), **{k: getattr(full, k) for k in sim_compare.LATENCY_KEYS}}
    rows = sim_compare.compare(pred, sim_compare.measured_from_summary(summary))
    measured_traj = [(e["t"], e["to"]) for e in summary.get("scale_events") or []]
    ts, reps = res.series.get("t", []), res.series.get("replicas", [])
    predicted_traj = [
        (round(t, 1), int(r))
        for i, (t, r) in enumerate(zip(ts, reps, strict=True))
        if i == 0 or reps[i - 1] != r
    ]
    return {
        "comparison": {r["metric"]: r for r in rows if r["metric"] != "drain_task_minutes"},
        "agrees": sim_compare.agrees([r for r in rows if r["metric"] != "drain_task_minutes"]),
        "params": used,
        "not_modelled": unknown,
        "config": cfg.__dict__,
        "predicted_replica_changes": predicted_traj,
        "measured_replica_changes": measured_traj,
    }


def recheck(out: Path, merge: list[Path] | None = None) -> dict[str, Any]:
    """Recompute every KEDA run's model check (and the plots) in a finished ``out`` from the files
    each run kept (summary.json, trace.csv), with the model as it is now; the measurements are not
    touched. ``bench/versus.py --recheck OUT`` (after a change to the model). ``merge``: other
    finished outputs of the same profile and variants (e.g. run with --first-round 1) whose rounds
    are added to ``out``'s, by round index."""
    old = json.loads((out / "versus.json").read_text())
    # each output's rounds keep the load average and the time of the output they came from
    merged = old.get("merged_outputs") or [
        {
            "out": str(out),
            "load_average": old.get("load_average"),
            "written_at": old.get("written_at"),
            "rounds": [r["index"] for r in old["rounds"]],
        }
    ]
    for other in merge or []:
        more = json.loads((other / "versus.json").read_text())
        if more["profile"] != old["profile"]:
            raise ValueError(f"{other}: profile {more['profile']!r}, not {out}'s {old['profile']!r}")
        for name, d in more["variants"].items():  # a variant may be new; one of the same name is the same
            if isinstance(d, dict) and name in old["variants"] and old["variants"][name] != d:
                raise ValueError(
                    f"{other}: variant {name!r} has other settings than in {out}: {d} vs "
                    f"{old['variants'][name]}"
                )
            old["variants"].setdefault(name, d)
        have = {fig.get("out") for r in old["rounds"] for fig in r["results"].values()}
        added = []
        for r in sorted(more["rounds"], key=lambda r: r["index"]):
            if {fig.get("out") for fig in r["results"].values()} <= have:
                continue  # merged before
            # a colliding index (both outputs started at round 0) is numbered after the last; the
            # order (who ran first) is the round's own
            index = (
                r["index"]
                if r["index"] not in {x["index"] for x in old["rounds"]}
                else max(x["index"] for x in old["rounds"]) + 1
            )
            old["rounds"].append({**r, "index": index})
            added.append(index)
        old["rounds"].sort(key=lambda r: r["index"])
        if added:
            merged.append(
                {
                    "out": str(other),
                    "load_average": more.get("load_average"),
                    "written_at": more.get("written_at"),
                    "rounds": added,
                }
            )
    variants = {n: KedaVariant.from_description(d) for n, d in old["variants"].items() if isinstance(d, dict)}
    rounds = []
    for r in old["rounds"]:
        rnd = Round(int(r["index"]), list(r["order"]), dict(r["results"]))
        for name, fig in rnd.results.items():
            if name in variants:
                run_out = Path(fig["out"])
                summary = json.loads((run_out / "summary.json").read_text())
                fig["model"] = model_check(summary, variants[name], run_out)
        rounds.append(rnd)
    vs = Versus(
        profile=old["profile"],
        variants=list(variants.values()),
        rounds=len(rounds),
        out=out,
        lagpilot="lagpilot" in old["variants"],
    )
    result = vs._write(
        rounds,
        {"keda_version": old.get("keda_version")},
        keep={
            "load_average": old.get("load_average"),
            "written_at": old.get("written_at"),
            "rechecked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **({"merged_outputs": merged} if len(merged) > 1 else {}),
        },
    )
    return result


@dataclass
class Versus:
    """The rounds; everything under ``out``."""

    profile: str
    variants: list[KedaVariant]
    rounds: int
    out: Path
    plain: bool = True
    first_round: int = 0  # the index of the first round (its parity decides who runs first)
    lagpilot: bool = True  # False: KEDA variants only (rounds to merge into another output)

    def variant_names(self) -> list[str]:
        return [*(["lagpilot"] if self.lagpilot else []), *(v.name for v in self.variants)]

    def run(self) -> dict[str, Any]:
        from lagpilot_dev.stack import Stack

        self.out.mkdir(parents=True, exist_ok=True)
        stack = Stack()
        info, lease = stack.acquire(VERSUS_PARTS)
        keda_info = info.parts.get("keda") or {}
        by_name = {v.name: v for v in self.variants}
        done: list[Round] = []
        try:
            for i in range(self.first_round, self.first_round + self.rounds):
                rnd = Round(i, round_order(self.variant_names(), i))
                for name in rnd.order:
                    run_out = self.out / f"round{i}-{name}"
                    summary = self._one(stack, info, by_name.get(name), run_out, i)
                    fig = figures(summary)
                    fig["out"] = str(run_out)
                    if name in by_name:
                        with contextlib.suppress(Exception):
                            fig["model"] = model_check(summary, by_name[name], run_out)
                    rnd.results[name] = fig
                    self._write([*done, rnd], keda_info)
                done.append(rnd)
        finally:
            stack.release(lease, stop=True)
        return self._write(done, keda_info)

    def _one(self, stack: Any, info: Any, variant: KedaVariant | None, out: Path, i: int) -> dict[str, Any]:
        tag = "lp" if variant is None else variant.name.replace("_", "-")[:20]
        # the demo's own parser, so every option it knows has its default (the profile is set after:
        # `hot` is one of VERSUS_PROFILES, not a choice of the demo's --profile)
        args = demo_parse_args(
            # the real node, as the demo (the pod runner is gone: issue 24 step 6)
            [
                "--namespace",
                f"versus-{tag}-{i}",
                "--out",
                str(out),
                *(["--plain"] if self.plain else []),
            ]
        )
        args.profile = self.profile
        root = logging.getLogger()
        handlers = list(root.handlers), list(logging.getLogger("lagpilot_dev").handlers)
        run = VariantRun(args, stack, info, variant)
        try:
            print(f"\n=== round {i}: {variant.name if variant else 'lagpilot'} (output {out})", flush=True)
            return run.run_variant()
        finally:
            run.cleanup()
            for lg, before in ((root, handlers[0]), (logging.getLogger("lagpilot_dev"), handlers[1])):
                for h in list(lg.handlers):
                    if h not in before:
                        lg.removeHandler(h)

    def _write(
        self,
        rounds: list[Round],
        keda_info: dict[str, Any],
        keep: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        result = {
            "profile": self.profile,
            "keda_version": keda_info.get("keda_version"),
            "variants": {
                **(
                    {"lagpilot": "the demo's BatchConsumerGroup (lagpilot operator, drains on)"}
                    if self.lagpilot
                    else {}
                ),
                **{v.name: v.describe() for v in self.variants},
            },
            "rounds": [{"index": r.index, "order": r.order, "results": r.results} for r in rounds],
            "summary": medians(rounds) if rounds else {},
            "load_average": list(os.getloadavg()),
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(keep or {}),
        }
        (self.out / "versus.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        if rounds:
            try:
                from lagpilot_dev.versus_plot import plot_summary

                plot_summary(result, self.out / "versus.png")
            except Exception as exc:  # noqa: BLE001 - the figures stand without the plot
                log.warning("versus summary plot failed", extra={"error": repr(exc)[:300]})
        for r in rounds:
            try:
                from lagpilot_dev.versus_plot import plot_round

                plot_round(
                    {"results": r.results},
                    self.out / f"round{r.index}.png",
                    f"lagpilot vs KEDA {result['keda_version']} · profile {self.profile} · round {r.index} "
                    f"(order {' → '.join(r.order)})",
                )
            except Exception as exc:  # noqa: BLE001 - the figures stand without the plot
                log.warning("versus plot failed", extra={"error": repr(exc)[:300]})
        return result
