"""The CR's Spark RPC key (issue 23, H4): the shared secret of a Spark-on-Kubernetes drain's RPC.

A Secret `<cr>-drain-rpc-key` (32 random bytes, hex; immutable), created by the operator before
it launches a drain Job or a warm runtime whose driver runs executors as pods (a k8s master),
owned by the CR (deleted with it). The driver's pod mounts it (drain_manifests.drain_pod_spec) and
Spark mounts it in every executor pod (`spark.kubernetes.executor.secrets`); both read it as a
file (`spark.authenticate.secret.{driver,executor}.file`), so Spark generates no secret and puts
none into the executor pods' environment, where anyone who may `get` pods could read it. The
operator uses no key itself: it makes sure the Secret exists, is the CR's and holds a well-formed
key (a Secret of that name the CR does not own is refused: a key someone else chose must never be
trusted). Never logged: only the Secret's name is.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from lagpilot_runtime import hex_key

from .drain_manifests import spark_rpc_key_secret_name
from .key_secret import CrKeys, KeyKind

KEY_BYTES = hex_key.KEY_BYTES  # the one size of a per-CR key (hex_key)


def new_key() -> str:
    return hex_key.new_key(KEY_BYTES)


def parse_key(text: Any) -> bytes:
    """The key from its hex form; ValueError unless it is exactly KEY_BYTES bytes."""
    return hex_key.parse_key(text, "Spark RPC key", KEY_BYTES)


# its Secret: owned by the CR, immutable (a new key is a new Secret: delete it and the operator makes
# another before the next launch)
SPARK_RPC_KEY = KeyKind("Spark RPC key", spark_rpc_key_secret_name, "drain-rpc-key", new_key, parse_key)


# the CRs' Spark RPC keys (``SparkRpcKeys(core, sanitize)``): ``key`` makes sure the Secret is there and
# sound (the operator uses no key itself)
SparkRpcKeys = partial(CrKeys, SPARK_RPC_KEY)
