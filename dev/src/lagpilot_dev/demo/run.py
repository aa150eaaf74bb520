"""`lagpilot demo`: lagpilot doing its job on the embedded stack, live in the terminal.

    lagpilot demo [--profile default|fast] [--keep] [--cold-drains | --runtime-on-demand SECONDS]
                  [--namespace NS] [--out DIR] [--plain]

Stages (each prints what it waits for):
 1. the embedded stack: Kafka, the Kubernetes control plane, PostgreSQL, Spark's Kafka connector and
    the real node (kubelet, containerd + runc, CNI, kube-proxy, CoreDNS; installed into the cache on
    first use: the first run builds Kubernetes and the node from the Go module proxy);
 2. the CRD, a namespace enforcing Pod Security `restricted`, a 3-partition topic and the
    PostgreSQL DSN Secret;
 3. the images built from this checkout and loaded into the node's containerd, and the operator
    installed by `helm install` (the chart's Deployment, a container on the node;
    lagpilot_dev.demo.node);
 4. a BatchConsumerGroup (<out>/bcg.yaml, applied with the real kubectl) whose handler writes to
    PostgreSQL through the built-in sink behind an artificial per-record cost (demo.handler);
 5. the replay of a scaled-down seed backfill (quiet → a peak the group cannot absorb → quiet)
    with a live view: per-partition lag and backlog, projection vs SLA, replicas, the drain and
    its progress, the conditions and `kubectl get bcg`;
 6. waiting for every record to reach PostgreSQL;
 7. the summary table, the PNG plot, the JSON summary, the trace it replayed (trace.csv) and the
    proof: produced = distinct records in PostgreSQL, and the delivery ledger (one row per delivery,
    no key) shows nothing lost and nothing delivered twice; then what the calibrated simulator says
    of the same trace (static replicas, KEDA, and lagpilot predicted vs measured). Exit status 1
    when the proof fails.

Every lagpilot pod is a container on the node (docs/node.md; needs root): the output prints the
runtime's own listing (`crictl ps -a`) after stage 4 and after catching up, and summary.json's
`node` says which pods ran as containers.

Everything the demo starts is stopped on exit or Ctrl-C (the stack parts only if the demo started
them and --keep is not given). With --keep the stack, the namespace, the CR and the operator's helm
release stay: the kubelet keeps running the pods and a CR applied or edited afterwards is
reconciled. The demo then prints how to take it down (also in <out>/kept.json), the
`export KUBECONFIG=...` line, the Prometheus URL when the dev stack's prometheus part runs, and
kubectl lines to try.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

from lagpilot_dev.demo import keep as demo_keep
from lagpilot_dev.demo import summary as demo_summary
from lagpilot_dev.demo.cluster import Cluster
from lagpilot_dev.demo.config import CRD_NAME, PARTS_WITHOUT_OPERATOR, RunNames, manifest, profile_for
from lagpilot_dev.demo.console import Console, DemoError, setup_logging
from lagpilot_dev.demo.loop import RunLoop
from lagpilot_dev.demo.node import NODE_PARTS, NodeRun, start_builds
from lagpilot_dev.demo.observe import Observer
from lagpilot_dev.demo.operator import BareConsumer
from lagpilot_dev.demo.traffic import PROFILES
from lagpilot_dev.helm import HELM_VERSION

log = logging.getLogger("lagpilot_dev.demo")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="lagpilot demo",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="default",
        help="default: the README demo (< 10 min warm); fast: shorter spike, used by the test",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="leave the stack, namespace, CR and the operator's helm release up at the end (a CR "
        "applied or edited afterwards is reconciled); prints how to take them down",
    )
    runtime = p.add_mutually_exclusive_group()
    runtime.add_argument(
        "--cold-drains",
        action="store_true",
        help="spec.drain.warmRuntime false: every drain starts its own Spark (no warm runtime pod)",
    )
    runtime.add_argument(
        "--runtime-on-demand",
        type=int,
        default=None,
        metavar="SECONDS",
        help="the warm drain runtime on demand (spec.drain.warmRuntimeCooldownSeconds SECONDS): "
        "scaled 0 -> 1 when a drain falls due (its split waits until the runtime is Ready), "
        "back to 0 SECONDS after the last drain; the summary adds its scale-ups, warm-up "
        "and up-time (default: the runtime runs all the time)",
    )
    p.add_argument(
        "--namespace", default="lagpilot-demo", help="namespace for the demo (default %(default)s)"
    )
    p.add_argument(
        "--out", default=None, help="directory for logs, plot and summary (default: <cache>/demo/<timestamp>)"
    )
    p.add_argument(
        "--plain",
        action="store_true",
        help="no live redraw: one progress line every few seconds (the default when stdout is not a terminal)",
    )
    # the old opt-in (sessions before issue 24 step 5): the only path now, still accepted
    p.add_argument("--node", action="store_true", help=argparse.SUPPRESS)
    # development aid until the operator lands: run one consumer process directly, no CR, no Spark
    p.add_argument("--no-operator", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.node and args.no_operator:
        p.error("--node runs the operator as a pod: not with --no-operator")
    # the real node (the bare consumer runs no pods at all)
    args.node = not args.no_operator
    try:  # the profile's own rules (the CRD's range of the cooldown), as a usage error
        profile_for(args.profile, args.cold_drains, args.runtime_on_demand)
    except ValueError as err:
        p.error(str(err))
    return args


class Demo:
    """One run of the demo: the stages in order (`run()`), and `cleanup()` undoing what they started.
    Each part it starts is one object: the stack and its objects (Cluster), the node's images and
    helm release (NodeRun), the sampling (Observer) and the replay loop (RunLoop)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.profile = profile_for(args.profile, args.cold_drains, args.runtime_on_demand)
        self.names = RunNames.new(args.namespace, args.out)
        self.names.out.mkdir(parents=True, exist_ok=True)
        self.console = Console(live=sys.stdout.isatty() and not args.plain)
        parts = NODE_PARTS if args.node else PARTS_WITHOUT_OPERATOR
        self.cluster = Cluster(self.console, self.names, parts, node=args.node)
        self.observer = Observer(self.cluster, self.profile)
        # created once the stack is up (they need its connection details)
        self.node: NodeRun | None = None  # on the node: the helm release and the containers' record
        self.builds: Any = None  # on the node: the images' and helm's builds, started before stage 1
        self.bare_consumer = BareConsumer()
        self.loop = RunLoop(
            self.console,
            self.names,
            self.profile,
            self.observer,
            operator_dead=self._operator_dead,
            restarts=self._operator_restarts,
        )
        setup_logging(self.names.out, self.console)

    def _operator_dead(self) -> str | None:
        return self.node.dead() if self.node is not None else None

    def _operator_running(self) -> bool:
        return self.node is not None and self.node.running()

    def _operator_restarts(self) -> int:
        return self.node.restarts if self.node is not None else 0

    def _operator_exit_codes(self) -> list[int]:
        return self.node.exit_codes if self.node is not None else []

    # ---- the stages --------------------------------------------------------------------------------
    def run(self) -> int:
        runtime = (
            f" · warm drain runtime on demand (cooldown {self.profile.runtime_cooldown_s} s)"
            if self.profile.runtime_on_demand
            else ""
        )
        print(
            f"lagpilot demo · profile {self.profile.name}{runtime} · output in {self.names.out}", flush=True
        )
        if self.args.node:  # the images and helm build beside stage 1 (lagpilot_dev.coldprep)
            self.builds = start_builds()
        self.cluster.acquire_stack()
        self.stage_resources()
        self.stage_operator()
        self.stage_group()
        self.loop.replay(self.cluster.info.bootstrap_servers)
        self.loop.catch_up()
        if self.node is not None:
            self.node.show_containers("\n      the runtime's own listing, after catching up")
        return demo_summary.report(
            self.console,
            self.names,
            self.profile,
            pg=self.cluster.pg,
            samples=self.observer.samples,
            producer=self.loop.producer,
            operator_restarts=self._operator_restarts(),
            operator_exit_codes=self._operator_exit_codes(),
            node=self.node.summary() if self.node is not None else None,
        )

    def stage_resources(self) -> None:
        n = self.names
        t0 = self.console.begin(
            2,
            f"CRD, namespace {n.ns}, topic {n.topic} (3 partitions), PostgreSQL Secret",
            f"CRD {CRD_NAME} to be Established",
        )
        self.cluster.apply_crd()
        self.cluster.create_resources(self.profile)
        if self.args.node:  # what the namespace says, as the apiserver has it
            labels = self.cluster.kubectl(
                "get", "namespace", n.ns, "-o", "jsonpath={.metadata.labels}"
            ).stdout
            self.console.say(
                f"$ kubectl get namespace {n.ns} -o jsonpath='{{.metadata.labels}}'  →  {labels}", indent=True
            )
        self.console.done(
            "resources", t0, f"namespace {n.ns}, topic {n.topic}, Secret demo-pg (the DSN; never printed)"
        )

    def stage_operator(self) -> None:
        console, n, info = self.console, self.names, self.cluster.info
        if self.args.node:
            self.stage_operator_on_node()
            return
        t0 = console.begin(3, "--no-operator: one bare consumer process", "the consumer to start")
        self.bare_consumer.start(
            n,
            self.profile,
            info,
            manifest(n, self.profile, info.bootstrap_servers)["spec"]["processing"]["config"],
        )
        console.done("operator_up", t0, "--no-operator: one bare consumer process instead")

    def stage_operator_on_node(self) -> None:
        """The images into the node's containerd, the operator by `helm install`."""
        console, cluster = self.console, self.cluster
        t0 = console.begin(
            3,
            "The images on the node, and the operator by `helm install` (a Deployment on the node)",
            "the images to be built and loaded",
        )
        self.node = NodeRun(console, self.names, cluster.info, cluster.kubectl, cluster.api)
        builds = self.builds
        self.node.prepare_images(
            cluster.stack, built=(lambda: builds.result("images")) if builds is not None else None
        )
        if builds is not None:
            builds.result(f"helm {HELM_VERSION}")  # NodeRun.install finds it built
        self.node.install()
        console.done(
            "operator_up",
            t0,
            f"operator pod Ready on node {self.node.node.info()['node_name']} "
            f"(release {self.node.op_ns}/{self.node.release})",
        )

    def stage_group(self) -> None:
        import yaml
        from kubernetes import client

        console, n, cluster = self.console, self.names, self.cluster
        t0 = console.begin(
            4,
            f"BatchConsumerGroup {n.ns}/{n.name} → PostgreSQL table {n.table}",
            "the operator to create the consumer Deployment",
        )
        if self.args.no_operator:
            console.wait(self.observer.group_has_members, f"a member in consumer group {n.group_id}", 120)
            console.done("group_ready", t0, "--no-operator: bare consumer joined")
            return
        path = n.out / "bcg.yaml"
        image = self.node.consumer_image if self.node is not None else None
        path.write_text(
            "# applied by `lagpilot demo`\n"
            + yaml.safe_dump(
                manifest(n, self.profile, cluster.pods_bootstrap_servers(), image), sort_keys=False
            )
        )
        cluster.kubectl("apply", "-f", str(path))
        console.say(f"$ kubectl apply -f {path}", indent=True)
        apps = client.AppsV1Api(cluster.api)
        core = client.CoreV1Api(cluster.api)
        console.wait(
            lambda: apps.read_namespaced_deployment(n.deployment, n.ns),
            f"Deployment {n.ns}/{n.deployment}",
            120,
            alive=self._operator_dead,
        )
        console.say(
            "✓ Deployment created; waiting for: a consumer pod to run (a container on the node)", indent=True
        )

        def pod_running() -> bool:
            pods = core.list_namespaced_pod(n.ns).items
            return any(p.status.phase == "Running" for p in pods)

        console.wait(pod_running, "a consumer pod in phase Running", 120, alive=self._operator_dead)
        console.say(
            f"✓ consumer pod running; waiting for: consumer group {n.group_id} to have a member", indent=True
        )
        console.wait(
            self.observer.group_has_members,
            f"a member in consumer group {n.group_id}",
            120,
            alive=self._operator_dead,
        )
        console.say("waiting for: the operator's first status (partitions observed)", indent=True)
        console.wait(
            lambda: (cluster.status().get("partitions") or 0) >= 1,
            "status.partitions",
            120,
            alive=self._operator_dead,
        )
        if self.node is not None:
            if self.profile.warm_runtime and not self.profile.runtime_on_demand:
                console.say(
                    "waiting for: the warm drain runtime Ready (a JVM on the node; the demo's drains are warm)",
                    indent=True,
                )
                console.wait(
                    self.node.runtime_ready,
                    "the warm drain runtime pod Ready",
                    600,
                    alive=self._operator_dead,
                )
            self.node.show_containers("on the node now")
        console.done("group_ready", t0, "consumer running, status reported")

    # ---- cleanup -----------------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Undo what this run started, in dependency order; never raises."""
        keep = self.args.keep
        steps: list[tuple[str, Callable[[], None]]] = [("stop the producer", self.loop.stop_producer)]
        if self.node is not None:  # before the CR goes: its pods' logs go with them
            steps.append(("save the pods' logs (kubectl logs)", self.node.save_logs))
        if not keep:
            steps.append(
                (
                    "delete the BatchConsumerGroup (the operator removes its finalizer)",
                    lambda: self.cluster.delete_cr(self._operator_running),
                )
            )
        if self.node is not None:
            if not keep:
                steps.append(("helm uninstall the operator", self.node.uninstall))
            else:
                steps.append(("leave the operator's release installed", self.node.stop_sampler))
        else:
            steps.append(("stop the bare consumer", self.bare_consumer.stop))
        if not keep:
            steps += [("delete the namespace, topic and tables", self.cluster.delete_resources)]
        steps.append(("release the stack", lambda: self.cluster.release_stack(keep)))
        print("\ncleaning up:", flush=True)
        for what, fn in steps:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - clean up as much as possible
                log.warning("cleanup step failed", extra={"step": what, "error": repr(exc)[:500]})
                print(f"      {what}: failed ({exc!r:.200})", flush=True)
        if keep and self.cluster.info is not None:
            self._print_kept()

    def _print_kept(self) -> None:
        """--keep: what still runs (also in <out>/kept.json), how to stop it, what to try."""
        if self.node is not None:
            n, info = self.names, self.cluster.info
            kept_node = {
                "operator_release": self.node.release,
                "operator_namespace": self.node.op_ns,
                "namespace": n.ns,
                "topic": n.topic,
                "tables": [n.table, n.ledger_table],
                "prometheus_url": self.cluster.prometheus_url(),
            }
            demo_keep.write_kept(n.out, kept_node)
            print()
            print(
                "\n".join(
                    demo_keep.kept_lines_node(
                        ns=n.ns,
                        name=n.name,
                        op_ns=self.node.op_ns,
                        release=self.node.release,
                        exports=info.shell_exports()[:1],
                        kubectl=info.kubectl,
                        crictl=self.node.node.info()["crictl"] if self.node.node is not None else None,
                        prometheus_url=kept_node["prometheus_url"],
                    )
                )
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    demo = Demo(args)

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    rc = 2
    try:
        rc = demo.run()
    except KeyboardInterrupt:
        print("\ninterrupted", flush=True)
        rc = 130
    except DemoError as exc:
        print(f"\ndemo failed at stage '{demo.console.stage}': {exc}", file=sys.stderr, flush=True)
        rc = 2
    except Exception as exc:  # any other failure of a stage (an image build, the API): exit 2, not 1
        log.exception("stage failed", extra={"stage": demo.console.stage})
        print(f"\ndemo failed at stage '{demo.console.stage}': {exc!r:.2000}", file=sys.stderr, flush=True)
        rc = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        demo.cleanup()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
