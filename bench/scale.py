"""Scale benchmark: one real operator, N BatchConsumerGroups over T topics on one Kafka cluster.

    .venv/bin/python bench/scale.py [--crs 200] [--topics 20] [--poll 10] [--quick] [--json]

What runs (the local stack: `lagpilot dev up --parts kafka,kube` or started here under a lease):
the operator as a subprocess (`lagpilot operator --namespace NS --standalone`, admin kubeconfig),
T topics of 3 partitions, N CRs (`minReplicas: 0`, no backlog, `sink: log`, drain off): every CR's
control loop observes Kafka each `pollIntervalSeconds` and decides 0 replicas, so no consumer pod
runs and 2 cores hold it. Nothing is produced: the figures are about the operator's own cost.

Reported (JSON with --json):
- `crs`, `topics`, `poll_interval_s`;
- `ready_seconds`: from the one `kubectl apply` of all CRs until every CR has `Ready=True`;
- over a measurement window of `--window-cycles` poll intervals after that:
  `cycle_p50_s` / `cycle_p99_s` (from the operator's `lagpilot_cycle_duration_seconds` histogram,
  interpolated inside its bucket), `cr_cycles`;
  `admin_requests_per_cycle` (all Kafka requests per poll interval on the one cluster, by kind in
  `kafka_requests_by_kind`), `watermark_requests_per_cycle` (DescribeTopics + ListOffsets: the
  shared cluster views), `views_per_cycle` (cluster views per poll interval: 1 when every CR's
  cycle shares one), `offset_fetch_per_cycle` (per-group OffsetFetch: only the fallback of the
  `__consumer_offsets` snapshot), `offsets_topic_fetch_per_cycle` (the snapshot consumer's Fetch
  requests, from librdkafka's statistics every 5 s); see docs/operator.md "Scale";
  `api_requests_per_cycle` (Kubernetes requests through the kubernetes client per CR cycle, by
  verb in `api_requests_by_verb`; kopf's watches and event posts not included);
- `operator_rss_mb` (VmRSS at the end), `load_before`/`load_after` (1-min load averages);
- start-up, from the operator's "first cycle done" log lines: `first_cycles` (CRs whose loop
  finished a first cycle: every CR, or the ready wait would have failed), `first_cycle_s` (p50 /
  p90 / max seconds from a CR's creation to the end of its first cycle), `first_cycle_failed`
  (first cycles that failed, e.g. an API timeout) and `adopt_s` (p50 / max: the remainder check).
--quick: 20 CRs over 4 topics, poll 5 s, 2 window cycles.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CRD_FILE = REPO / "crds" / "batchconsumergroup.yaml"
CRD_NAME = "batchconsumergroups.lagpilot.io"


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text → {(name, sorted labels): value}."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$", line)
        if not m:
            continue
        labels = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or "")))
        try:
            out[(m.group(1), labels)] = float(m.group(4))
        except ValueError:
            continue
    return out


def delta_by(m0: dict[Any, float], m1: dict[Any, float], name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (n, labels), v in m1.items():
        if n != name:
            continue
        key = dict(labels).get(label, "")
        out[key] = out.get(key, 0.0) + v - m0.get((n, labels), 0.0)
    return out


def histogram_quantile(q: float, buckets: dict[str, float]) -> float | None:
    """Quantile from cumulative bucket counts {le: count} (linear inside the bucket, like PromQL)."""
    items = sorted(((float("inf") if le == "+Inf" else float(le)), c) for le, c in buckets.items())
    if not items or items[-1][1] <= 0:
        return None
    rank = q * items[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in items:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 1.0)
        prev_le, prev_c = le, c
    return prev_le


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


class Bench:
    def __init__(self, kubectl: str, kubeconfig: str, bootstrap: str) -> None:
        self.kubectl_path, self.kubeconfig, self.bootstrap = kubectl, kubeconfig, bootstrap

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.kubectl_path, "--kubeconfig", self.kubeconfig, *args],
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()[:500]}")
        return proc


def cr(name: str, topic: str, group: str, bootstrap: str, poll: int) -> dict[str, Any]:
    return {
        "apiVersion": "lagpilot.io/v1alpha1",
        "kind": "BatchConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "topic": topic,
            "groupId": group,
            "processing": {"sink": "log"},
            "drain": {"enabled": False},
            "scaling": {"minReplicas": 0, "maxReplicas": 2, "pollIntervalSeconds": poll},
        },
    }


def ready_count(b: Bench, ns: str) -> tuple[int, int] | None:
    """(Ready CRs, CRs); None when the API server did not answer in time (a loaded machine: the
    list of 200 CRs with their statuses can time out), so the caller polls again."""
    proc = b.kubectl("get", "bcg", "-n", ns, "-o", "json", timeout=120, check=False)
    if proc.returncode != 0:
        print(f"listing the CRs failed (polling again): {proc.stderr.strip()[:200]}", file=sys.stderr)
        return None
    items = json.loads(proc.stdout)["items"]
    ready = 0
    for it in items:
        for c in (it.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "True":
                ready += 1
    return ready, len(items)


def first_cycles(log_text: str) -> dict[str, Any]:
    """The operator's "first cycle done" lines (one per CR loop start) -> start-up figures."""
    rows = []
    for line in log_text.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("message") == "first cycle done":
            rows.append(d)

    def q(xs: list[float], f: float) -> float | None:
        xs = sorted(xs)
        return round(xs[min(len(xs) - 1, int(f * len(xs)))], 2) if xs else None

    created = [float(r.get("since_created_s") or 0) for r in rows]
    adopt = [float(r.get("adopt_s") or 0) for r in rows]
    return {
        "first_cycles": len({r.get("group") for r in rows}),
        "first_cycle_failed": sum(1 for r in rows if not r.get("ok")),
        "first_cycle_s": {"p50": q(created, 0.5), "p90": q(created, 0.9), "max": q(created, 1.0)},
        "adopt_s": {"p50": q(adopt, 0.5), "max": q(adopt, 1.0)},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    import yaml
    from confluent_kafka.admin import AdminClient, NewTopic

    from lagpilot_dev.paths import free_port
    from lagpilot_dev.stack import Stack

    stack = Stack()
    info, lease = stack.acquire(["kafka", "kube"])
    b = Bench(str(info.kubectl), str(info.kubeconfig), str(info.bootstrap_servers))
    run_id = uuid.uuid4().hex[:6]
    ns = f"bench-scale-{run_id}"
    topics = [f"bench-scale-{run_id}-t{i:02d}" for i in range(args.topics)]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    op: subprocess.Popen[bytes] | None = None
    log_path = Path(tempfile.mkdtemp(prefix="lagpilot-bench-scale-")) / "operator.log"
    load_before = os.getloadavg()[0]
    result: dict[str, Any] = {}
    try:
        b.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=lagpilot-bench",
            "-f",
            str(CRD_FILE),
        )
        b.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=120s", timeout=150)
        b.kubectl("create", "namespace", ns)
        for f in admin.create_topics([NewTopic(t, 3, 1) for t in topics]).values():
            f.result(60)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAGPILOT_")}
        env.update(
            {
                "KUBECONFIG": b.kubeconfig,
                "PYTHONPATH": str(REPO / "operator" / "src") + os.pathsep + str(REPO),
                "LAGPILOT_KAFKA_TIMEOUT_SECONDS": "10",
                # every CR's cycle runs at the interval's start (docs/operator.md "Scale")
                "LAGPILOT_CYCLE_WORKERS": str(args.cycle_workers),
            }
        )
        fh = open(log_path, "ab")
        op = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lagpilot.cli",
                "operator",
                "--namespace",
                ns,
                "--standalone",
                "--metrics-port",
                str(port),
                "--metrics-host",
                "127.0.0.1",
            ],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        print(f"operator pid {op.pid}, log {log_path}", file=sys.stderr)

        def metrics() -> dict[Any, float]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                return parse_metrics(r.read().decode())

        deadline = time.monotonic() + 120
        while True:  # the metrics endpoint is up once the operator started
            try:
                metrics()
                break
            except OSError as err:
                if op.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"operator did not start (exit {op.poll()}); log {log_path}") from err
                time.sleep(0.5)
        objs = [
            cr(f"g{i:03d}", topics[i % len(topics)], f"bench-scale-{run_id}-g{i:03d}", b.bootstrap, args.poll)
            for i in range(args.crs)
        ]
        t0 = time.monotonic()
        b.kubectl("apply", "-n", ns, "-f", "-", input_text=yaml.safe_dump_all(objs), timeout=600)
        ready, total = 0, 0
        while True:
            counted = ready_count(b, ns)
            ready, total = counted if counted is not None else (ready, total)
            if counted is not None and ready == args.crs:
                break
            if op.poll() is not None:
                raise RuntimeError(f"operator exited ({op.returncode}); log {log_path}")
            if time.monotonic() - t0 > args.ready_timeout:
                raise RuntimeError(
                    f"only {ready}/{total} CRs Ready after {args.ready_timeout:.0f}s; log {log_path}"
                )
            time.sleep(2)
        ready_s = time.monotonic() - t0
        print(f"all {ready} CRs Ready after {ready_s:.1f}s", file=sys.stderr)
        time.sleep(args.poll)  # past the start-up cycles (first cycles read partitions twice)
        m0, w0 = metrics(), time.monotonic()
        time.sleep(args.poll * args.window_cycles)
        m1, w1 = metrics(), time.monotonic()
        cluster_cycles = (w1 - w0) / args.poll
        buckets = delta_by(m0, m1, "lagpilot_cycle_duration_seconds_bucket", "le")
        cr_cycles = sum(delta_by(m0, m1, "lagpilot_cycle_duration_seconds_count", "").values())
        kafka = {k: int(v) for k, v in delta_by(m0, m1, "lagpilot_kafka_requests_total", "kind").items() if v}
        kube_by_verb = delta_by(m0, m1, "lagpilot_kube_requests_total", "verb")
        kube = sum(kube_by_verb.values())
        errors = {
            k: int(v) for k, v in delta_by(m0, m1, "lagpilot_observe_errors_total", "reason").items() if v
        }
        watermark = kafka.get("describe_topics", 0) + kafka.get("list_offsets", 0)

        def r(x: float | None, n: int = 3) -> float | None:
            return None if x is None else round(x, n)

        result = {
            "cycle_workers": args.cycle_workers,
            "crs": args.crs,
            "topics": args.topics,
            "clusters": 1,
            "poll_interval_s": args.poll,
            "ready_seconds": round(ready_s, 1),
            "window_s": round(w1 - w0, 1),
            "cr_cycles": int(cr_cycles),
            "cycle_p50_s": r(histogram_quantile(0.5, buckets)),
            "cycle_p99_s": r(histogram_quantile(0.99, buckets)),
            # snapshot_fallback counts cycles that fell back (their OffsetFetch is counted as offset_fetch)
            "admin_requests_per_cycle": r(
                sum(v for k, v in kafka.items() if k != "snapshot_fallback") / cluster_cycles, 1
            ),
            "watermark_requests_per_cycle": r(watermark / cluster_cycles, 1),
            # shared cluster views (each: ListOffsets A + B) per poll interval: 1 when every CR's cycle shares one
            "views_per_cycle": r(kafka.get("list_offsets", 0) / 2 / cluster_cycles, 1),
            "offset_fetch_per_cycle": r(kafka.get("offset_fetch", 0) / cluster_cycles, 1),
            "offsets_topic_fetch_per_cycle": r(kafka.get("offsets_topic_fetch", 0) / cluster_cycles, 1),
            "kafka_requests_by_kind": kafka,
            "api_requests_per_cycle": r(kube / cr_cycles, 2) if cr_cycles else None,
            "api_requests_by_verb": {k: int(v) for k, v in kube_by_verb.items() if v},
            "observe_errors": errors,
            "operator_rss_mb": rss_mb(op.pid),
            **first_cycles(log_path.read_text(errors="replace")),
            "load_before": round(load_before, 1),
            "load_after": round(os.getloadavg()[0], 1),
        }
    finally:
        try:
            if op is not None and op.poll() is None:
                # delete the CRs while the operator runs (its finalizer), then stop it
                b.kubectl(
                    "delete",
                    "bcg",
                    "--all",
                    "-n",
                    ns,
                    "--wait=true",
                    "--timeout=300s",
                    check=False,
                    timeout=330,
                )
        finally:
            if op is not None and op.poll() is None:
                op.terminate()
                try:
                    op.wait(30)
                except subprocess.TimeoutExpired:
                    op.kill()
            b.kubectl("delete", "namespace", ns, "--wait=false", check=False)
            try:
                for f in admin.delete_topics(topics).values():
                    f.result(60)
            except Exception as err:  # noqa: BLE001 - best effort cleanup
                print(f"topic cleanup: {err}", file=sys.stderr)
            stack.release(lease, stop=os.environ.get("LAGPILOT_KEEP_STACK", "") in ("", "0", "false"))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crs", type=int, default=None, help="CRs (default 200; --quick: 20)")
    ap.add_argument("--topics", type=int, default=None, help="topics (default 20; --quick: 4)")
    ap.add_argument("--poll", type=int, default=None, help="pollIntervalSeconds (default 10; --quick: 5)")
    ap.add_argument(
        "--window-cycles", type=int, default=None, help="poll intervals measured (default 3; --quick: 2)"
    )
    ap.add_argument(
        "--cycle-workers",
        type=int,
        default=None,
        help="LAGPILOT_CYCLE_WORKERS (default CRs + 8, at least 32)",
    )
    ap.add_argument("--ready-timeout", type=float, default=900.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.crs = args.crs or (20 if args.quick else 200)
    args.topics = args.topics or (4 if args.quick else 20)
    args.poll = args.poll or (5 if args.quick else 10)
    args.window_cycles = args.window_cycles or (2 if args.quick else 3)
    args.cycle_workers = args.cycle_workers or max(32, args.crs + 8)
    result = run(args)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
