"""`kubectl lagpilot`: BatchConsumerGroups from kubectl (docs/kubectl-plugin.md).

Installed as the `kubectl-lagpilot` executable (pyproject [project.scripts]); kubectl finds it on
PATH. Plugin conventions: `-n/--namespace`, `-A/--all-namespaces`, `--context`, `--kubeconfig`,
`-o/--output table|json|yaml`. Commands:

    top                     every group at a glance (lag, replicas, projection vs SLA, health)
    status NAME             per partition: lag, time lag, rates; capacity, projection; the drain
    why NAME                the last decision with the numbers it used
    drains NAME             the current drain and the past ones
    pause NAME / resume NAME   set spec.paused
    simulate bcg/NAME       the simulator fed with the group's live figures and settings

The status is read only through lagpilot.status_view.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from lagpilot import status_view as sv
from lagpilot.model.crd import GROUP, KIND, PLURAL, SHORT_NAMES, VERSION


class PluginError(Exception):
    pass


class Client:
    """The CR reads and the pause patch, through the kubernetes client with kubectl's kubeconfig."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        from kubernetes import client, config

        try:
            api = config.new_client_from_config(config_file=kubeconfig, context=context)
            default_ns = config.list_kube_config_contexts(config_file=kubeconfig)[1]
            if context:
                contexts = config.list_kube_config_contexts(config_file=kubeconfig)[0]
                default_ns = next((c for c in contexts if c["name"] == context), default_ns)
        except Exception as err:  # noqa: BLE001 - no kubeconfig, unknown context
            raise PluginError(f"cannot load the kubeconfig: {err}") from None
        self.default_namespace = str(((default_ns or {}).get("context") or {}).get("namespace") or "default")
        self.custom = client.CustomObjectsApi(api)
        self._exc = client.ApiException

    def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except self._exc as err:
            if err.status == 404:
                raise PluginError(f"not found: {args[-1] if args else ''}") from None
            raise PluginError(f"API error {err.status}: {err.reason}") from None

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self._call(
            self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
        )
        return obj

    def list(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace is None:
            out = self._call(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
        else:
            out = self._call(self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL)
        return sorted(out.get("items", []), key=lambda o: (sv.namespace(o), sv.name(o)))

    def set_paused(self, namespace: str, name: str, paused: bool) -> dict[str, Any]:
        obj: dict[str, Any] = self._call(
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"spec": {"paused": paused}},
        )
        return obj


# ------------------------------------------------------------------------------- formatting


def _f(x: Any, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _dur(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 3600:
        return f"{x / 3600:.1f}h"
    if x >= 60:
        return f"{x / 60:.1f}m"
    return f"{x:.0f}s"


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in cells)


def emit(data: Any, output: str, text: Callable[[], str]) -> str:
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=False, default=str)
    if output == "yaml":
        return yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False).rstrip()
    return text()


# ------------------------------------------------------------------------------- commands


def cmd_top(objs: list[dict[str, Any]], output: str, all_ns: bool) -> str:
    data = [sv.summary(o) for o in objs]

    def text() -> str:
        if not data:
            return "No BatchConsumerGroups found."
        head = (["NAMESPACE"] if all_ns else []) + [
            "NAME",
            "MODE",
            "READY",
            "HEALTH",
            "REPLICAS",
            "DESIRED",
            "LAG",
            "RATE/S",
            "CAPACITY/S",
            "CATCH-UP",
            "SLA",
            "DRAIN",
        ]
        rows = []
        for s in data:
            mode = s["mode"] + ("(paused)" if s["paused"] else "")
            rows.append(
                ([s["namespace"]] if all_ns else [])
                + [
                    s["name"],
                    mode,
                    s["ready"],
                    s["health"],
                    _f(s["replicas"]),
                    _f(s["desiredReplicas"]),
                    _f(s["totalLag"]),
                    _f(s["produceRate"]),
                    _f(s["capacityPerReplica"]),
                    _dur(s["projectedCatchUpSeconds"]),
                    _dur(s["slaSeconds"]),
                    s["drainPhase"] or "-",
                ]
            )
        return table(rows, head)

    return emit(data, output, text)


def cmd_status(obj: dict[str, Any], output: str) -> str:
    s = sv.summary(obj)
    parts = sv.partitions(obj)
    d = sv.drain(obj)
    data: dict[str, Any] = {
        "group": s,
        "partitions": [p.__dict__ for p in parts],
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message")} for c in sv.conditions(obj)
        ],
        "drain": d.__dict__ if d else None,
        "recommendation": sv.recommendation(obj),
    }

    def text() -> str:
        cap = s["capacityPerReplica"]
        out = [
            f"BatchConsumerGroup {s['namespace']}/{s['name']}  mode={s['mode']}{' paused' if s['paused'] else ''}  "
            f"health={s['health']}  ready={s['ready']}",
            f"replicas {_f(s['replicas'])} (desired {_f(s['desiredReplicas'])}, min {s['minReplicas']}, "
            f"max {s['maxReplicas']}, partitions {_f(s['partitions'])})",
            f"lag {_f(s['totalLag'])} records, produce {_f(s['produceRate'])}/s, capacity {_f(cap)}/s per replica, "
            f"projected catch-up {_dur(s['projectedCatchUpSeconds'])} (SLA {_dur(s['slaSeconds'])})",
            "",
            "PARTITIONS",
        ]
        out.append(
            table(
                [
                    [
                        p.partition,
                        _f(p.lag),
                        _dur(p.oldest_age_s),
                        _f(p.produce_rate, 2),
                        _f(p.consume_rate, 2),
                        _f(p.committed),
                        _f(p.end),
                    ]
                    for p in parts
                ],
                ["PARTITION", "LAG", "TIME-LAG", "PRODUCE/S", "COMMIT/S", "COMMITTED", "END"],
            )
        )
        out += [
            "",
            "CONDITIONS",
            table(
                [
                    [str(c[k] or "")[:100] for k in ("type", "status", "reason", "message")]
                    for c in data["conditions"]
                ],
                ["TYPE", "STATUS", "REASON", "MESSAGE"],
            ),
        ]
        rec = data["recommendation"]
        if rec:
            out += [
                "",
                f"RECOMMENDATION  {rec.get('currentReplicas')} -> {rec.get('replicas')} replicas"
                f"{' + drain' if rec.get('drain') else ''} ({rec.get('reason')}; replicas from "
                f"{rec.get('source')}, capacity from {rec.get('capacitySource')}) since {rec.get('since')}",
                f"  {rec.get('message')}",
            ]
        if d:
            out += ["", _drain_text(d)]
        return "\n".join(out)

    return emit(data, output, text)


def _drain_text(d: sv.DrainView) -> str:
    done = sum(1 for x in d.sub_ranges if x.get("next", 0) >= x.get("end", 0))
    lines = [
        f"DRAIN {d.id}  phase={d.phase}  reason={d.reason}  attempt={_f(d.attempt)}  "
        f"records {_f(d.records_done)}/{_f(d.records_total)}  tasks {done}/{len(d.sub_ranges)} done",
        f"  {d.message}" if d.message else "",
    ]
    if d.ranges:
        lines.append(
            _indent(
                table(
                    [
                        [r.get("partition"), _f(r.get("start")), _f(r.get("end")), _f(r.get("tasks"))]
                        for r in d.ranges
                    ],
                    ["PARTITION", "START", "SPLIT", "TASKS"],
                )
            )
        )
    if d.sub_ranges:
        lines.append(
            _indent(
                table(
                    [
                        [
                            f"p{x['partition']}#{x['index']}",
                            x["start"],
                            x["end"],
                            x["next"],
                            x["records"],
                            f"{100.0 * (x['next'] - x['start']) / max(1, x['end'] - x['start']):.0f}%",
                        ]
                        for x in d.sub_ranges
                    ],
                    ["TASK", "START", "END", "NEXT", "RECORDS", "PROGRESS"],
                )
            )
        )
    return "\n".join(x for x in lines if x)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def cmd_why(obj: dict[str, Any], output: str) -> str:
    w = sv.decision(obj)

    def text() -> str:
        i, p = w["inputs"], w["policy"]
        out = [
            f"{sv.namespace(obj)}/{sv.name(obj)}: {w['reason']} (Scaling={w['scaling']}, since {w['decidedAt']})",
            f"  {w['message']}",
            "",
            f"catch-up at risk: {w['catchUpAtRisk']} ({w['catchUpReason']}): {w['catchUpMessage']}"
            if w["catchUpReason"]
            else "catch-up at risk: False (not listed: within the SLA)"
            if w["catchUpAtRisk"] == "False"
            else "catch-up at risk: unknown (no conditions written yet)",
            "",
            "inputs:",
            f"  lag {_f(i['totalLag'])} records (max partition {_f(i['maxPartitionLag'])}) on {_f(i['partitions'])} partitions",
            f"  produce rate {_f(i['produceRate'])}/s, capacity {_f(i['capacityPerReplica'])}/s per replica",
            f"  replicas {_f(i['replicas'])} -> desired {_f(i['desiredReplicas'])}",
            f"  projected catch-up at current replicas {_dur(i['projectedCatchUpSeconds'])}, SLA {_dur(i['slaSeconds'])}",
            f"  last scale {i['lastScaleTime'] or '-'}",
            "policy:",
            f"  replicas {p['minReplicas']}..{p['maxReplicas']}, tolerance {p['tolerance']}, stabilization up "
            f"{p['scaleUpStabilizationSeconds']}s / down {p['scaleDownStabilizationSeconds']}s, drain "
            f"{'on' if p['drainEnabled'] else 'off'}",
        ]
        rec = w["recommendation"]
        if rec:
            out += [
                "",
                f"mode Recommend: would go {rec.get('currentReplicas')} -> {rec.get('replicas')} replicas"
                f"{' and drain' if rec.get('drain') else ''}; not applied (capacity from {rec.get('capacitySource')})",
            ]
        return "\n".join(out)

    return emit(w, output, text)


def cmd_drains(obj: dict[str, Any], output: str) -> str:
    d = sv.drain(obj)
    hist = sv.drain_history(obj)
    data = {"current": d.__dict__ if d else None, "history": hist}

    def text() -> str:
        out = [_drain_text(d)] if d else ["no drain recorded"]
        out += ["", "HISTORY"] + ([f"  {h['line']}" for h in hist] or ["  (none)"])
        return "\n".join(out)

    return emit(data, output, text)


def cmd_simulate(obj: dict[str, Any], output: str, horizon_s: float) -> str:
    from lagpilot.sim.params import SimParams
    from lagpilot.sim.policies import run_all
    from lagpilot.sim.report import format_table
    from lagpilot.sim.trace import trace_from_rows

    live = sv.simulation_inputs(obj)
    spec = sv.spec(obj)
    sc = spec.get("scaling") or {}
    dr = spec.get("drain") or {}
    beh = sc.get("behavior") or {}
    n = int(live["partitions"] or 1)
    if live["capacityPerReplica"] is None:
        raise PluginError(
            "the group has no measured capacity yet (status.capacityPerReplica): nothing to simulate"
        )
    rate = float(live["produceRate"] or 0.0)
    step = 5.0
    lag = sum(live["partitionLag"].values())
    weights = tuple(live["partitionLag"].get(p, 0) / lag if lag else 1.0 / n for p in range(n))
    # the current backlog, produced in the first step (as the partitions hold it), then the live rate
    rows = [(0.0, rate + lag / step, weights), (step, rate, None), (horizon_s, rate, None)]
    params = SimParams(
        partitions=n,
        capacity=float(live["capacityPerReplica"]),
        sla_s=float(spec.get("catchUpSLASeconds", 600)),
        step_s=step,
        min_replicas=int(sc.get("minReplicas", 1)),
        max_replicas=int(sc.get("maxReplicas", 10)),
        poll_interval_s=float(sc.get("pollIntervalSeconds", 15)),
        scale_down_window_s=float((beh.get("scaleDown") or {}).get("stabilizationWindowSeconds", 300)),
        max_drain_tasks=int(dr.get("maxTasks", 16)),
        min_backlog_records=int(dr.get("minBacklogRecords", 10_000)) if dr.get("enabled", True) else 10**15,
    )
    results, _ = run_all(trace_from_rows(rows), params, policies=("lagpilot", "static"))
    data = {
        "inputs": live,
        "horizonSeconds": horizon_s,
        "results": {k: v.to_dict() for k, v in results.items()},
    }

    def text() -> str:
        return (
            f"simulating {sv.namespace(obj)}/{sv.name(obj)} for {_dur(horizon_s)}: backlog {lag} records now, "
            f"produce {rate:.1f}/s, capacity {live['capacityPerReplica']:.1f}/s per replica, {n} partitions, "
            f"replicas {sc.get('minReplicas', 1)}..{sc.get('maxReplicas', 10)}, SLA "
            f"{_dur(float(spec.get('catchUpSLASeconds', 600)))}, drain {'on' if dr.get('enabled', True) else 'off'}\n"
            + format_table(results)
        )

    return emit(data, output, text)


# ------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kubectl lagpilot", description="BatchConsumerGroups from kubectl.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", default=None)
    common.add_argument("-A", "--all-namespaces", action="store_true")
    common.add_argument("--context", default=None)
    common.add_argument("--kubeconfig", default=None)
    common.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("top", parents=[common], help="every group at a glance")
    for c, h in (
        ("status", "partitions, capacity, projection, the drain"),
        ("why", "the last decision and its inputs"),
        ("drains", "the current and past drains"),
        ("pause", "set spec.paused true"),
        ("resume", "set spec.paused false"),
    ):
        p = sub.add_parser(c, parents=[common], help=h)
        p.add_argument("name")
    p = sub.add_parser("simulate", parents=[common], help="simulate the group from its live figures")
    p.add_argument("name", help="bcg/NAME or NAME")
    p.add_argument("--horizon", type=float, default=3600.0, help="seconds to simulate (default 3600)")
    return ap


def _name(raw: str) -> str:
    kind, _, rest = raw.partition("/")
    if not rest:
        return raw
    if kind.lower() not in (*SHORT_NAMES, KIND.lower(), PLURAL, f"{PLURAL}.{GROUP}"):
        raise PluginError(f"{raw}: expected bcg/NAME")
    return rest


def run(argv: Sequence[str], client_factory: Callable[[str | None, str | None], Any] = Client) -> str:
    args = build_parser().parse_args(argv)
    c = client_factory(args.kubeconfig, args.context)
    ns = args.namespace or c.default_namespace
    if args.command == "top":
        all_ns = args.all_namespaces
        return cmd_top(c.list(None if all_ns else ns), args.output, all_ns)
    name = _name(args.name)
    if args.command in ("pause", "resume"):
        obj = c.set_paused(ns, name, args.command == "pause")
        return emit(
            {"name": name, "namespace": ns, "paused": sv.paused(obj)},
            args.output,
            lambda: f"batchconsumergroup.lagpilot.io/{name} {'paused' if sv.paused(obj) else 'resumed'}",
        )
    obj = c.get(ns, name)
    if args.command == "status":
        return cmd_status(obj, args.output)
    if args.command == "why":
        return cmd_why(obj, args.output)
    if args.command == "drains":
        return cmd_drains(obj, args.output)
    return cmd_simulate(obj, args.output, args.horizon)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        print(run(sys.argv[1:] if argv is None else argv))
    except PluginError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `kubectl lagpilot ... | head`
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
