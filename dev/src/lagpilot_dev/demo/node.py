"""`lagpilot demo` on the real node (the default since issue 24 step 5, the only path since the pod
runner retired in step 6; docs/node.md): the demo's pods as containers.

What that takes:
- the stack adds the `node` part (kubelet, containerd + runc, CNI, kube-proxy, CoreDNS) and the
  `netpol` part (kube-router's policy controller: the operator's NetworkPolicies enforced; built on
  first use, minutes cold: docs/node.md "NetworkPolicy"); summary.json's
  `node.network_policy_enforced` says it ran; the node starts first, so a broker or PostgreSQL
  started by this run listens on its bridge too;
- the images are built from this checkout's unchanged Dockerfiles (`lagpilot dev images`, buildah,
  cached layers) and loaded into the node's containerd (no registry): the operator image and the
  demo's consumer image, which is lagpilot/consumer plus the demo's handler (dev/demo_image, a
  derived image as users add their handler);
- the operator is the chart's Deployment, installed by `helm install` into `<ns>-operator`
  (watchNamespaces: the demo namespace); both namespaces enforce Pod Security `restricted` (their
  pods go to the node's scheduler, the cluster's default);
- the CR names the pods' way to Kafka (the broker's PODS listener on the bridge gateway) and the
  demo image (`imagePullPolicy: Never`); the DSN Secret holds the pods' DSN (the bridge gateway);
- every few seconds the demo reads the runtime's own listing (`crictl ps -a`) and the API's pods
  of both namespaces; the summary says which pods ran as containers (all of them, or which not),
  and the listing is printed.

The scheduler reserves CPU by requests, and the node has 2 cores. The warm drain runtime requests
`maxTasks` x `LAGPILOT_DRAIN_CPU_PER_TASK_M` (default 250m: the demo's 12 tasks = 3 CPUs, never
schedulable here), and so does a drain Job that drains by itself (cold: the runtime was not Ready
when the attempt started), at least 500m. Seen on the first run with 100m per task: the runtime
(1200m) was still warming up when the first drain fell due, the cold Job (1200m) did not fit beside
it and stayed Pending ("Insufficient cpu") until the stall detector's NoRunningPod (300 s). The
release sets DRAIN_CPU_PER_TASK_M through the chart's `operator.extraEnv` so that the operator (50m),
three consumers (3 x 100m), the runtime and a cold Job fit together; requests are the scheduler's
bookkeeping, not a cap (no CPU limit is set). And before the replay the demo waits for the runtime
to be Ready (`wait_runtime_ready`): the demo's drains are meant to be warm.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lagpilot_dev.demo.config import PARTS, RunNames
from lagpilot_dev.demo.console import Console, DemoError

log = logging.getLogger("lagpilot_dev.demo")

NODE_PARTS = (*PARTS, "node", "netpol")
DEMO_IMAGES = ("operator", "consumer", "demo")


def check_image_preconditions() -> None:
    """DemoError saying what to do when the images cannot be built here (before anything starts)."""
    from lagpilot_dev.images import tools as images_tools

    problems = images_tools.missing_preconditions(images_tools.default_layout())
    if problems:
        raise DemoError("cannot build the images here: " + "; ".join(problems))


def start_builds() -> Any:
    """The images and helm, started beside stage 1 (lagpilot_dev.coldprep: on a cold cache they build
    while the stack's parts build, instead of after them; warm: found in seconds). Stage 3 waits."""
    from lagpilot_dev import coldprep
    from lagpilot_dev.helm import HELM_VERSION

    check_image_preconditions()
    return coldprep.start(coldprep.Plan(images=DEMO_IMAGES, helm=(HELM_VERSION,)))


DRAIN_CPU_PER_TASK_M = 50  # 12 tasks: 600m for the warm runtime, 600m for a cold Job (see above)
NODE_CPU_M = 2000  # the node's allocatable CPU (2 cores, nothing reserved)
MAX_OPERATOR_RESTARTS = 3
SAMPLE_EVERY_S = 5.0
# the node's pods' CPU (every container of the node sits under the kubelet's `kubepods` cgroup), read
# once a second: a figure of this run is only as good as the CPU the node got (docs/node.md "CPU")
CPU_EVERY_S = 1.0
KUBEPODS_CPUACCT = "/sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def namespace_labels() -> dict[str, str]:
    """The labels of both demo namespaces on the node: Pod Security `restricted` (their pods go to
    the node's scheduler, the cluster's default, without any label)."""
    return dict(RESTRICTED)


def operator_namespace(ns: str) -> str:
    return f"{ns}-operator"


def helm_values(ns: str, operator_image: str) -> dict[str, Any]:
    """The release's values: the watched namespace, the loaded image (never pulled), the drain's CPU
    request per task (see the module docstring). Nothing else about the node."""
    repository, tag = operator_image.rsplit(":", 1)
    return {
        "watchNamespaces": [ns],
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "operator": {
            "extraEnv": [{"name": "LAGPILOT_DRAIN_CPU_PER_TASK_M", "value": str(DRAIN_CPU_PER_TASK_M)}]
        },
    }


def containers_of(listing: Mapping[str, Any], namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """`crictl ps -a -o json` → one row per container of these namespaces (pure)."""
    rows = []
    for c in listing.get("containers") or []:
        labels = c.get("labels") or {}
        ns = labels.get("io.kubernetes.pod.namespace")
        if ns not in namespaces:
            continue
        rows.append(
            {
                "namespace": ns,
                "pod": labels.get("io.kubernetes.pod.name"),
                "pod_uid": labels.get("io.kubernetes.pod.uid"),
                "container": (c.get("metadata") or {}).get("name"),
                "id": str(c.get("id") or "")[:13],
                "image": (c.get("image") or {}).get("image") or c.get("imageRef"),
                "state": c.get("state"),
            }
        )
    return rows


def image_names(listing: Mapping[str, Any]) -> dict[str, str]:
    """`crictl images -o json` → image id → its docker.io/lagpilot/... name, else its first tag (pure)."""
    out = {}
    for img in listing.get("images") or []:
        tags = sorted(img.get("repoTags") or [], key=lambda t: (not t.startswith("docker.io/"), t))
        if tags:
            out[str(img.get("id"))] = tags[0]
    return out


def pods_without_containers(
    pods: Mapping[str, Mapping[str, Any]], containers: Mapping[str, Any]
) -> list[str]:
    """Pods (uid → what the API said) that reached a container state and never showed in the
    runtime's listing (pure): what would make "every lagpilot pod a container" false. A pod that
    never got past Pending (deleted first) had no container to show."""
    return sorted(
        f"{p['namespace']}/{p['name']}"
        for uid, p in pods.items()
        if p.get("started") and uid not in containers
    )


def format_listing(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The runtime's listing as crictl prints it (the columns that matter here)."""
    out = [f"{'CONTAINER':<14} {'STATE':<18} {'NAME':<10} {'POD':<48} NAMESPACE   IMAGE"]
    for r in sorted(rows, key=lambda r: (r["namespace"], r["pod"] or "", r["container"] or "")):
        out.append(
            f"{r['id']:<14} {r['state']!s:<18} {r['container']!s:<10} {r['pod']!s:<48} "
            f"{r['namespace']}   {r['image']}"
        )
    return out


@dataclass
class NodeRun:
    """The node side of one `lagpilot demo` run: the images, the helm release of the
    operator, the operator pod's restarts, and the record of which pods ran as containers."""

    console: Console
    names: RunNames
    info: Any  # StackInfo
    kubectl: Any  # Cluster.kubectl
    api: Any  # kubernetes ApiClient
    node: Any = None  # lagpilot_dev.node.NodePart
    helm: Any = None  # the helm binary
    images: dict[str, str] = field(default_factory=dict)  # name → reference (the name pods use)
    installed: bool = False
    restarts: int = 0
    exit_codes: list[int] = field(default_factory=list)
    # what the sampler saw: pod uid → {namespace, name, node, started}; pod uid → container rows
    pods_seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    containers_seen: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    last_listing: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _image_names: dict[str, str] = field(default_factory=dict)  # image id → a name (crictl images)
    cpu: list[tuple[float, float, float]] = field(default_factory=list)  # (epoch s, node pods' CPU-s, load1)
    _cpu_thread: threading.Thread | None = None

    @property
    def op_ns(self) -> str:
        return operator_namespace(self.names.ns)

    @property
    def release(self) -> str:
        """The helm release: the demo namespace's name (it contains "lagpilot", so the chart names
        its objects, the cluster-scoped ones too, after it: two demo namespaces never collide)."""
        return self.names.ns

    @property
    def namespaces(self) -> tuple[str, str]:
        return (self.names.ns, self.op_ns)

    @property
    def consumer_image(self) -> str:
        return self.images["demo"]

    # ---- images ------------------------------------------------------------------------------------
    def prepare_images(self, stack: Any, built: Callable[[], Any] | None = None) -> None:
        """Build the images from this checkout (cached layers: only what changed) and load them into
        the node's containerd. `built`: the build started beside the stack (`start_builds`), waited
        for here, instead of building now."""
        from lagpilot_dev.images.build import IMAGES
        from lagpilot_dev.images.command import build_and_run

        console = self.console
        self.node = stack.part("node")
        check_image_preconditions()
        console.say(
            "building the images from this checkout (operator/Dockerfile, consumer_image/Dockerfile, "
            "dev/demo_image/Dockerfile; buildah, cached layers)"
            + ("; started beside stage 1, waiting for it" if built is not None else ""),
            indent=True,
        )
        # None from the started build: every image was built from this content already
        report = (built() if built is not None else None) or build_and_run(DEMO_IMAGES, run=False)
        for b in report.builds.values():
            console.say(
                f"✓ {b['image']}: {b['seconds']} s ({b['cached_steps']}/{b['steps']} steps cached)",
                indent=True,
            )
        for n in ("operator", "demo"):
            img = IMAGES[n]
            # its content tag: this checkout's build, whatever the machine's plain tag names by now
            secs = self.node.load_built_image(report.builds[n]["content_tag"], reference=img.reference)
            self.images[n] = img.reference
            console.say(
                f"✓ {img.reference} on the node (podman save | ctr images import): {secs} s", indent=True
            )

    # ---- the operator: helm install ----------------------------------------------------------------
    def install(self) -> None:
        from kubernetes import client

        from lagpilot_dev import helm as h

        console, op_ns = self.console, self.op_ns
        core = client.CoreV1Api(self.api)
        self.helm = h.ensure_helm()
        kube_args = ["-n", op_ns, "--kubeconfig", str(self.info.kubeconfig)]
        # a previous run's release (--keep, or a crash): gone first, as its namespace if it is going
        h.run_helm(
            self.helm,
            ["uninstall", self.release, "--ignore-not-found", "--wait", "--timeout", "180s", *kube_args],
            timeout=240,
        )

        def namespace_ready() -> bool:
            try:
                got = core.read_namespace(op_ns)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
                core.create_namespace({"metadata": {"name": op_ns, "labels": namespace_labels()}})
                return True
            if got.status.phase == "Terminating":
                return False
            core.patch_namespace(op_ns, {"metadata": {"labels": namespace_labels()}})
            return True

        console.wait(namespace_ready, f"namespace {op_ns} (the release's)", 180)
        values = self.names.out / "values.json"
        values.write_text(json.dumps(helm_values(self.names.ns, self.images["operator"]), indent=2) + "\n")
        argv = ["install", self.release, str(h.CHART_DIR), "-f", str(values), *kube_args]
        console.say(f"$ helm install {self.release} charts/lagpilot -n {op_ns} -f {values}", indent=True)
        h.run_helm(self.helm, argv, timeout=300)
        self.installed = True
        console.wait(
            self.operator_ready,
            f"the operator pod in {op_ns} Ready (the kubelet's probes)",
            300,
            alive=self.dead,
        )
        self.start_sampler()

    def _operator_pods(self) -> list[Any]:
        from kubernetes import client

        return list(
            client.CoreV1Api(self.api)
            .list_namespaced_pod(self.op_ns, label_selector=f"app.kubernetes.io/instance={self.release}")
            .items
        )

    def operator_ready(self) -> bool:
        for pod in self._operator_pods():
            if pod.metadata.deletion_timestamp is None and any(
                c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
            ):
                return True
        return False

    def running(self) -> bool:
        return self.installed

    def dead(self) -> str | None:
        """None while the operator pod runs or restarts within MAX_OPERATOR_RESTARTS (the kubelet
        restarts it; each restart and its exit code are counted for the summary); after that, why
        the demo gives up. An image the node cannot run is given up at once."""
        try:
            pods = self._operator_pods()
        except Exception:  # noqa: BLE001 - the API may hiccup under load: not a dead operator
            return None
        for pod in pods:
            for cs in pod.status.container_statuses or []:
                waiting = (
                    cs.state.waiting.reason if cs.state is not None and cs.state.waiting is not None else None
                )
                if waiting in ("ErrImageNeverPull", "InvalidImageName", "ErrImagePull", "ImagePullBackOff"):
                    return f"the operator pod {pod.metadata.name} cannot start: {cs.image}: {waiting}"
                if int(cs.restart_count or 0) > self.restarts:
                    self.restarts = int(cs.restart_count)
                    term = cs.last_state.terminated if cs.last_state is not None else None
                    if term is not None:
                        self.exit_codes.append(int(term.exit_code))
                    self.console.say(
                        f"the operator pod restarted (restart {self.restarts}; "
                        f"exit {term.exit_code if term is not None else '?'})",
                        indent=True,
                    )
        if self.restarts > MAX_OPERATOR_RESTARTS:
            return f"the operator pod restarted {self.restarts}x (exit codes {self.exit_codes})"
        return None

    def runtime_ready(self) -> bool:
        """The CR's warm drain runtime pod Ready (its JVM warm: `GET /healthz` 200, the kubelet's probe)."""
        from kubernetes import client

        from lagpilot.act.drain_runtime import selector

        pods = client.CoreV1Api(self.api).list_namespaced_pod(
            self.names.ns, label_selector=selector(self.names.name)
        )
        return any(
            p.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in pods.items
        )

    # ---- which pods ran as containers --------------------------------------------------------------
    def start_sampler(self) -> None:
        self._thread = threading.Thread(target=self._sample_loop, name="demo-node-sampler", daemon=True)
        self._thread.start()
        self._cpu_thread = threading.Thread(target=self._cpu_loop, name="demo-node-cpu", daemon=True)
        self._cpu_thread.start()

    def _cpu_loop(self) -> None:
        while True:
            got = read_cpu()
            if got is not None:
                with self._lock:
                    self.cpu.append(got)
            if self._stop.wait(CPU_EVERY_S):
                return

    def _sample_loop(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            with contextlib.suppress(Exception):
                self.sample()

    def sample(self) -> list[dict[str, Any]]:
        """One look at the API's pods of both namespaces and at the runtime's containers."""
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        pods = {}
        for ns in self.namespaces:
            for pod in core.list_namespaced_pod(ns).items:
                started = any(
                    cs.state is not None and (cs.state.running is not None or cs.state.terminated is not None)
                    for cs in pod.status.container_statuses or []
                )
                pods[pod.metadata.uid] = {
                    "namespace": ns,
                    "name": pod.metadata.name,
                    "node": pod.spec.node_name,
                    "started": started,
                }
        proc = self.node.crictl("ps", "-a", "-o", "json", timeout=60)
        rows = containers_of(json.loads(proc.stdout), self.namespaces) if proc.returncode == 0 else []
        for r in rows:  # crictl's JSON names the image by id: the name pods use, as `crictl images` lists it
            r["image"] = self._image_name(str(r["image"]))
        with self._lock:
            for uid, p in pods.items():
                seen = self.pods_seen.setdefault(uid, p)
                seen["started"] = seen["started"] or p["started"]
                seen["node"] = seen["node"] or p["node"]
            for r in rows:
                known = self.containers_seen.setdefault(r["pod_uid"], [])
                if r["id"] not in {k["id"] for k in known}:
                    known.append(r)
            if rows:
                self.last_listing = rows
        return rows

    def _image_name(self, image_id: str) -> str:
        if image_id not in self._image_names:
            proc = self.node.crictl("images", "-o", "json", timeout=60)
            if proc.returncode == 0:
                self._image_names.update(image_names(json.loads(proc.stdout)))
            self._image_names.setdefault(image_id, image_id)
        return self._image_names[image_id]

    def stop_sampler(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
        if self._cpu_thread is not None:
            self._cpu_thread.join(timeout=10)

    def show_containers(self, heading: str) -> None:
        rows = self.sample()
        crictl = self.node.info()["crictl"]
        self.console.say(
            f"{heading}: $ {crictl} ps -a   (the containers of {', '.join(self.namespaces)})", indent=True
        )
        for line in format_listing(rows):
            self.console.say("  " + line, indent=True)

    def summary(self) -> dict[str, Any]:
        """For summary.json "node": the pods the run saw, which ran as containers, the listing."""
        with contextlib.suppress(Exception):
            self.sample()
        with self._lock:
            node_name = self.node.info()["node_name"] if self.node is not None else None
            missing = pods_without_containers(self.pods_seen, self.containers_seen)
            off_node = sorted(
                f"{p['namespace']}/{p['name']}"
                for p in self.pods_seen.values()
                if p.get("node") and p["node"] != node_name
            )
            started = [p for p in self.pods_seen.values() if p.get("started")]
            return {
                "node": node_name,
                "images": dict(self.images),
                "operator_release": f"{self.op_ns}/{self.release}",
                "network_policy_enforced": bool(getattr(self.info, "running", {}).get("netpol")),
                "pods_seen": len(self.pods_seen),
                "pods_started": len(started),
                "pods_with_containers": sum(1 for uid in self.pods_seen if uid in self.containers_seen),
                "pods_without_containers": missing,
                "pods_on_other_nodes": off_node,
                "every_pod_a_container": bool(started) and not missing and not off_node,
                "cpus": os.cpu_count() or 1,
                "cpu_samples": [list(c) for c in self.cpu],
                "containers": sorted(
                    (
                        {k: v for k, v in r.items() if k != "pod_uid"}
                        for rows in self.containers_seen.values()
                        for r in rows
                    ),
                    key=lambda r: (r["namespace"], str(r["pod"]), str(r["container"])),
                ),
            }

    # ---- at the end --------------------------------------------------------------------------------
    def save_logs(self) -> None:
        """The operator's log and every pod's (kubectl logs, through the kubelet) into the output dir."""
        out = self.names.out / "pods"
        out.mkdir(parents=True, exist_ok=True)
        for ns in self.namespaces:
            proc = self.kubectl("get", "pods", "-n", ns, "-o", "name", check=False, timeout=60)
            for name in proc.stdout.split():
                pod = name.split("/", 1)[1]
                logs = self.kubectl(
                    "logs", "-n", ns, pod, "--all-containers", "--tail=-1", check=False, timeout=120
                )
                target = self.names.out / "operator.log" if ns == self.op_ns else out / f"{pod}.log"
                with open(target, "a") as fh:
                    fh.write(logs.stdout)

    def uninstall(self) -> None:
        from kubernetes import client

        from lagpilot_dev import helm as h

        self.stop_sampler()
        if self.installed and self.helm is not None:
            h.run_helm(
                self.helm,
                [
                    "uninstall",
                    self.release,
                    "-n",
                    self.op_ns,
                    "--wait",
                    "--timeout",
                    "180s",
                    "--kubeconfig",
                    str(self.info.kubeconfig),
                ],
                timeout=240,
            )
            self.installed = False
        with contextlib.suppress(client.ApiException):
            client.CoreV1Api(self.api).delete_namespace(self.op_ns, propagation_policy="Background")


def read_cpu(path: str = KUBEPODS_CPUACCT) -> tuple[float, float, float] | None:
    """(now, CPU-seconds the node's pods used so far, 1-minute load average); None without the cgroup."""
    try:
        with open(path) as fh:
            used = int(fh.read().strip()) / 1e9
    except (OSError, ValueError):
        return None
    return time.time(), used, os.getloadavg()[0]


def cpu_window(
    samples: Sequence[Sequence[float]], t0: float, t1: float, cpus: int
) -> dict[str, float] | None:
    """The node pods' CPU over [t0, t1] (pure): CPU-seconds, their share of the machine (all
    ``cpus`` cores), the mean 1-minute load average; None when no two samples span the window."""
    inside = [s for s in samples if t0 - 1.5 <= s[0] <= t1 + 1.5]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    a, b = inside[0], inside[-1]
    used = max(0.0, b[1] - a[1])
    return {
        "seconds": round(b[0] - a[0], 1),
        "cpu_seconds": round(used, 2),
        "share_of_machine": round(used / ((b[0] - a[0]) * max(1, cpus)), 3),
        "load1": round(sum(s[2] for s in inside) / len(inside), 1),
    }


def drain_cpu(node: Mapping[str, Any], drains: Sequence[dict[str, Any]]) -> None:
    """Adds ``node_cpu`` to each drain (in place): the node pods' CPU from its plan to its first
    drained record (``start_up_seconds``), the window the issue's start-up target is about."""
    samples, cpus = node.get("cpu_samples") or [], int(node.get("cpus") or 1)
    for d in drains:
        planned = (d.get("times") or {}).get("plannedAt")
        if planned is None or d.get("start_up_seconds") is None:
            continue
        t0 = float(planned)
        d["node_cpu"] = cpu_window(samples, t0, t0 + float(d["start_up_seconds"]), cpus)


def pods_bootstrap(info: Any) -> str:
    got = (info.parts.get("kafka") or {}).get("pods_bootstrap_servers")
    if not got:
        raise DemoError(
            "the broker has no PODS listener (it started before the node's bridge existed): "
            "restart the kafka part (`lagpilot dev down --parts kafka && lagpilot dev up --parts kafka`)"
        )
    return str(got)


def pods_dsn(info: Any) -> str:
    got = (info.parts.get("postgres") or {}).get("pods_postgres_dsn")
    if not got:
        raise DemoError(
            "PostgreSQL does not listen on the node's bridge (it started before the bridge existed): "
            "restart the postgres part"
        )
    return str(got)
