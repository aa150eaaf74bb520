"""The test-side pod runner: a stand-in for a kubelet, for the local dev stack only.

No kubelet (nor any container runtime) can run on these machines, yet the operator's whole point is
Pods: Deployments of consumers, drain Jobs. This runner makes the real controller-manager's
Deployment -> ReplicaSet -> Pod chain and Job controller observable end to end:

- it registers a Node (Ready, with capacity) and keeps its Lease and Ready condition fresh, so the
  node-lifecycle controller never taints it;
- it does the scheduler's one job too: an unbound Pod (default scheduler, nodeSelector matching)
  is bound to its Node through the `pods/binding` subresource (no kube-scheduler is run);
- for each Pod bound to its Node it runs the FIRST container's `command` + `args` as a local
  process (the image is ignored; a command without a path resolves through the project's
  `.venv/bin` first, `python` is the venv's interpreter; an image listed in `entrypoints` supplies
  the command when the container has none, and its CMD when there are no args either: test-side
  knowledge of our own images, e.g. Spark's executor pods of the consumer image), with the env the Pod spec gives (`value` with
  `$(VAR)` expansion, `secretKeyRef`, `configMapKeyRef`, `fieldRef`, `resourceFieldRef`, `envFrom`);
- it writes the status a kubelet would: phase Pending -> Running -> Succeeded/Failed, the
  PodScheduled / Initialized / ContainersReady / Ready conditions, containerStatuses (waiting /
  running / terminated with exit code, lastState, restartCount, ready), podIP 127.0.0.1, startTime;
- restart policy: Always / OnFailure restart after an exponential back-off (CrashLoopBackOff);
  Never (or OnFailure with exit 0) ends the pod Succeeded/Failed. A process that crashes or is
  killed (by anyone) is a crashed container: exit code 128+signal;
- deletion (deletionTimestamp set): SIGTERM to the process group, SIGKILL after the grace period,
  final status, then the Pod object is removed (delete with gracePeriodSeconds=0).

One network namespace for all: local pods cannot all listen on the same port, so each pod gets its
own free port in `LAGPILOT_METRICS_PORT` and `PORT` (overriding what the spec says). httpGet /
tcpSocket probes (readiness, liveness) go to 127.0.0.1: a probe port that is the spec's value of
LAGPILOT_METRICS_PORT or PORT (by number or through a named containerPort) goes to the pod's own
port; any other port is probed as written (fine for a single pod such as the operator).

Metrics: when the dev stack's Prometheus part exists (`metrics_sd_dir`), a pod whose container sets
LAGPILOT_METRICS_PORT gets a file-SD target `127.0.0.1:<its own port>` while its worker runs
(lagpilot_dev.prometheus, docs/observability.md).

In-cluster credentials: unless `automountServiceAccountToken: false`, the container's KUBECONFIG
points to a per-pod kubeconfig holding a TokenRequest token of the pod's ServiceAccount (bound to
the pod); `KUBERNETES_SERVICE_HOST` is not set, so `load_incluster_config()` fails over to it. So a
pod runs with exactly its ServiceAccount's RBAC, never the runner's admin identity.

Volumes: only `secret` volumes are emulated (the Spark RPC key of Spark-on-Kubernetes drains): the
Secret's keys are written as files under the pod's directory and bind-mounted read-only at the
mountPath in a private mount namespace of the process (`unshare --mount`: needs root; the pid
stays the process's). Other volumes are not (an emptyDir at /tmp is the host's /tmp).

Not emulated: init and sidecar containers (only the first container runs and is reported), other volumes,
startup probes, service env links, resource limits, image pulls, Events.

Usage: `PodRunner(kubeconfig, node_name, workdir).start()` (threads) / `.stop()` (kills its
processes), or `python -m lagpilot_dev.podrunner --kubeconfig K` in the foreground.

Modules (one reason to change each): `base` (constants, errors, time stamps, host helpers), `env`
(the container's environment), `container` (entrypoints and argv), `lifecycle` (restart decisions
and kubelet status shapes), `probes`, `worker` (one pod's process), `kubeapi` (the API calls made
for the workers), `node` (the Node and its heartbeat), `runner` (watch, scope, binding, workers),
`__main__` (the foreground command).
"""

from __future__ import annotations

from .base import (
    DEFAULT_NODE_NAME,
    INHERITED_ENV,
    KUBELET_VERSION,
    LOOPBACK,
    NODE_CAPACITY,
    RUNNER_LABEL,
    ContainerConfigError,
    StartError,
    now_micro,
    now_rfc3339,
)
from .container import DEFAULT_ENTRYPOINTS, DEFAULT_IMAGE_CMDS, build_argv, image_repository
from .env import expand_vars, parse_quantity, resolve_env
from .lifecycle import (
    ExitOutcome,
    crash_backoff,
    exit_code_of,
    exit_outcome,
    pod_conditions,
    terminated_state,
)
from .probes import PORT_ENV_VARS, probe_target, remapped_ports, resolve_probe_port
from .runner import PodRunner, node_selector_matches
from .worker import PodWorker

__all__ = [
    "DEFAULT_ENTRYPOINTS",
    "DEFAULT_IMAGE_CMDS",
    "DEFAULT_NODE_NAME",
    "INHERITED_ENV",
    "KUBELET_VERSION",
    "LOOPBACK",
    "NODE_CAPACITY",
    "PORT_ENV_VARS",
    "RUNNER_LABEL",
    "ContainerConfigError",
    "ExitOutcome",
    "PodRunner",
    "PodWorker",
    "StartError",
    "build_argv",
    "crash_backoff",
    "exit_code_of",
    "exit_outcome",
    "expand_vars",
    "image_repository",
    "main",
    "node_selector_matches",
    "now_micro",
    "now_rfc3339",
    "parse_quantity",
    "pod_conditions",
    "probe_target",
    "remapped_ports",
    "resolve_env",
    "resolve_probe_port",
    "terminated_state",
]


def main(argv: list[str] | None = None) -> int:
    """`python -m lagpilot_dev.podrunner` (lagpilot_dev.podrunner.__main__.main)."""
    from .__main__ import main as run

    return run(argv)
