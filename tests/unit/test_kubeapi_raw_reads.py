"""KubeApi's raw reads (the Deployment, the pods, the memory ConfigMap): the JSON body of a call
made with `_preload_content=False`, its connection always released, a 404 None where the object
may be absent, every other failure a KubeError naming what was read (`kubeapi._raw_json`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lagpilot.act.kubeapi import KubeApi, KubeError


class Resp:
    def __init__(self, body: Any, released: list[str]) -> None:
        self.data = json.dumps(body).encode()
        self._released = released

    def release_conn(self) -> None:
        self._released.append("released")


class Fail(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status, self.reason, self.body = status, "Nope", ""


class Client:
    def __init__(self, answer: Any) -> None:
        self.answer, self.released, self.calls = answer, [], []  # type: ignore[var-annotated]

    def _reply(self, *args: Any, **kw: Any) -> Resp:
        assert kw.get("_preload_content") is False  # the raw response, no client models
        self.calls.append(args)
        if isinstance(self.answer, Exception):
            raise self.answer
        return Resp(self.answer, self.released)

    read_namespaced_deployment = read_namespaced_config_map = list_namespaced_pod = _reply


def kube(client: Client) -> KubeApi:
    k = KubeApi.__new__(KubeApi)
    k.apps = k.core = client
    return k


def test_bodies_are_read_and_their_connections_released() -> None:
    c = Client({"metadata": {"name": "d"}, "items": [{"metadata": {"name": "p"}}]})
    k = kube(c)
    assert k.get_deployment("ns", "d")["metadata"]["name"] == "d"
    assert k.get_configmap("ns", "m")["metadata"]["name"] == "d"
    assert k.list_pods("ns", {"b": "2", "a": "1"}) == [{"metadata": {"name": "p"}}]
    assert c.released == ["released"] * 3
    assert c.calls == [("d", "ns"), ("m", "ns"), ("ns",)]


def test_absent_objects_are_none_and_other_failures_name_what_was_read() -> None:
    k = kube(Client(Fail(404)))
    assert k.get_deployment("ns", "d") is None and k.get_configmap("ns", "m") is None
    with pytest.raises(KubeError) as err:
        k.list_pods("ns", {"a": "1"})  # no pods is an empty list, never a 404: a 404 is an error
    assert "list pods ns -l a=1" in str(err.value)
    k = kube(Client(Fail(403)))
    for read, what in (
        (lambda: k.get_deployment("ns", "d"), "get Deployment ns/d"),
        (lambda: k.get_configmap("ns", "m"), "get ConfigMap ns/m"),
    ):
        with pytest.raises(KubeError) as err:
            read()
        assert what in str(err.value) and err.value.status == 403
