"""The kube-scheduler extender (`vte.openb.kube`): quantities, the GPU convention, the
protocol's payloads against k8s.io/kube-scheduler/extender/v1, bad input, the state
(snapshot, binds, watch), the binder, HTTPS, and trace -> YAML -> trace."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import threading
import time
import types

import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from vte.openb import cluster, workload  # noqa: E402
from vte.openb.kube import objects, quantity  # noqa: E402
from vte.openb.kube.convention import Convention  # noqa: E402
from vte.openb.kube.extender import FILTER_KEYS, Extender, create_app  # noqa: E402
from vte.openb.kube.twin import Twin, bucket, least_sufficient  # noqa: E402
from vte.openb.policies import POLICIES  # noqa: E402
from vte.openb.trace import load_nodes, load_pods  # noqa: E402

# The field lists of staging/src/k8s.io/kube-scheduler/extender/v1/types.go (Go structs
# without json tags: the JSON keys are the field names).
EXTENDER_ARGS = ("Pod", "Nodes", "NodeNames")
EXTENDER_FILTER_RESULT = ("Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                          "Error")
HOST_PRIORITY = ("Host", "Score")
EXTENDER_BINDING_ARGS = ("PodName", "PodNamespace", "PodUID", "Node")
EXTENDER_BINDING_RESULT = ("Error",)

# kube-scheduler-simulator's simulator/docs/extender.md: the Nodes its scheduler sent
# (two nodes of 4 CPUs and 32Gi, no GPU), as recorded in a pod's annotation.
SIMULATOR_NODES = json.loads("""{"metadata":{},"items":[{"metadata":{"name":"node-sc9ns",
"generateName":"node-","uid":"4b008c90-971e-4816-a0f4-dc1a3b6e856e","resourceVersion":"208",
"creationTimestamp":"2023-03-03T16:03:50Z","managedFields":[{"manager":"simulator",
"operation":"Update","apiVersion":"v1","time":"2023-03-03T16:03:50Z","fieldsType":"FieldsV1",
"fieldsV1":{"f:metadata":{"f:generateName":{}}}}]},"spec":{},"status":{"capacity":{"cpu":"4",
"memory":"32Gi","pods":"110"},"allocatable":{"cpu":"4","memory":"32Gi","pods":"110"},
"phase":"Running","conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":null,
"lastTransitionTime":null}],"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{
"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"",
"containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"",
"architecture":""}}},{"metadata":{"name":"node-pwzdq","generateName":"node-",
"uid":"b24f918d-94ae-4c35-9e2c-2376998dbede","resourceVersion":"209",
"creationTimestamp":"2023-03-03T16:03:53Z"},"spec":{},"status":{"capacity":{"cpu":"4",
"memory":"32Gi","pods":"110"},"allocatable":{"cpu":"4","memory":"32Gi","pods":"110"},
"phase":"Running"}}]}""")


def pod(name, cpu="1", memory="1Gi", count=None, milli=None, models=None, uid=None,
        node=None, index=None, phase=None):
    notes = {}
    for key, value in (("alibabacloud.com/gpu-count", count), ("alibabacloud.com/gpu-milli", milli),
                       ("alibabacloud.com/gpu-card-model", models),
                       ("alibabacloud.com/gpu-index", index)):
        if value is not None:
            notes[key] = value
    out = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                        "annotations": notes, "unknownField": {"ignored": True}},
           "spec": {"containers": [{"name": "main", "image": "x",
                                    "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
           "status": {"phase": phase or "Pending"}}
    if node:
        out["spec"]["nodeName"] = node
    return out


def gpu_node(name, gpus=2, model="V100M16", cpu="32", memory="128Gi"):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"alibabacloud.com/gpu-card-model": model}},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110",
                                       "alibabacloud.com/gpu-count": str(gpus)}}}


@pytest.fixture(scope="module")
def trace():
    nodes = load_nodes("gpu")
    return nodes, load_pods("default", nodes)


@pytest.fixture(scope="module")
def typical(trace):
    return workload.typical_pods(trace[1])


def make_client(typical, models, policy="fgd", binder=None, nodes=()):
    twin = Twin(POLICIES[policy], typical, models)
    for n in nodes:
        twin.add_node(objects.node_row(n))
    app = create_app(Extender(twin, binder=binder), policy, url_prefix="/vte")
    return twin, TestClient(app)


# --- quantities --------------------------------------------------------------------------

@pytest.mark.parametrize("text, milli", [
    ("4", 4000), ("500m", 500), ("1.5", 1500), ("1e3", 1_000_000), ("32Gi", 32 * 2**30 * 1000),
    (".5", 500), ("1.", 1000), ("+2k", 2_000_000), ("1E-3", 1), ("0.0001", 1), (64, 64000),
    ("12Mi", 12 * 2**20 * 1000), ("1u", 1)])
def test_quantities_parse_exactly_and_round_up_as_kubernetes(text, milli):
    assert quantity.milli_value(text) == milli


@pytest.mark.parametrize("bad", ["", "abc", "1.5.2", "Gi", "1Gb", "--1", "1e", "0x10", None,
                                 True, [], "1 Gi", "9" * 200])
def test_bad_quantities_name_the_field_and_value(bad):
    with pytest.raises(quantity.QuantityError, match="cpu"):
        quantity.parse(bad, "cpu")


def test_memory_in_mib_rounds_requests_up_and_capacities_down():
    assert quantity.mib("1Mi") == 1 and quantity.mib("1") == 1
    assert quantity.mib("1500Ki") == 2 and quantity.mib("1500Ki", round_up=False) == 1
    assert quantity.parse("1e3") == 1000 and quantity.parse("1.5") * 2 == 3


# --- objects -----------------------------------------------------------------------------

def test_a_pod_requests_what_node_resources_fit_counts():
    p = pod("p", cpu="250m", memory="100Mi", count="1", milli="300", models="V100M16|T4")
    p["spec"]["containers"].append({"name": "b", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}})
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
    p["spec"]["overhead"] = {"memory": "10Mi"}
    row = objects.pod_row(p)
    assert (row.cpu_milli, row.memory_mib) == (2000, 1134)    # max(sum, init); limits default
    assert (row.num_gpus, row.gpu_milli, row.models) == (1, 300, ("V100M16", "T4"))
    assert row.key == "uid-p" and row.active and row.gpu_index is None
    # a GPU pod without a milli annotation takes whole GPUs (pod_csv_to_yaml's default)
    assert objects.pod_row(pod("q", count="2")).gpu_milli == 1000


def test_extended_resources_read_a_hami_like_convention():
    p = pod("h")
    p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1",
                                                         "nvidia.com/gpucores": "30"}
    conv = Convention(gpu_count="nvidia.com/gpu", gpu_milli="nvidia.com/gpucores",
                      milli_per_unit=10)
    row = objects.pod_row(p, conv)
    assert (row.num_gpus, row.gpu_milli) == (1, 300)


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p["metadata"]["annotations"].update({"alibabacloud.com/gpu-count": "x"}), "gpu-count"),
    (lambda p: p["metadata"]["annotations"].update({"alibabacloud.com/gpu-milli": "1500"}), "gpu-milli"),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update({"cpu": "lots"}), "cpu"),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update({"memory": "-1Gi"}), "memory"),
    (lambda p: p["metadata"].update({"name": 7}), "name"),
    (lambda p: p["metadata"]["annotations"].update({"alibabacloud.com/gpu-index": "0-a"}), "gpu-index"),
    (lambda p: p["spec"].update({"containers": "nope"}), "containers")])
def test_bad_pod_fields_are_named(mutate, field):
    p = pod("p", count="1", milli="500")
    mutate(p)
    with pytest.raises(objects.KubeInputError, match=field):
        objects.pod_row(p)


def test_nodes_read_allocatable_gpus_and_model():
    row = objects.node_row(gpu_node("n", gpus=4, cpu="63500m", memory="1000000Ki"))
    assert (row.cpu_milli, row.memory_mib, row.num_gpus, row.model, row.pod_limit) == (
        63500, 976, 4, "V100M16", 110)
    bad = gpu_node("n")
    del bad["metadata"]["labels"]["alibabacloud.com/gpu-card-model"]
    with pytest.raises(objects.KubeInputError, match="gpu-card-model"):
        objects.node_row(bad)


def test_trace_to_yaml_to_trace_is_the_identity(trace, tmp_path):
    yaml = pytest.importorskip("yaml")
    nodes, pods = trace
    nodes = nodes.take(range(0, 1213, 20))
    pods = dataclass_take(pods, list(range(0, 8152, 25)))
    docs = objects.to_yaml(objects.node_objects(nodes) + objects.pod_objects(pods))
    (tmp_path / "c.yaml").write_text(docs)
    n2, p2 = objects.load_snapshot(tmp_path / "c.yaml")
    assert n2.names == nodes.names and n2.models == nodes.models
    for f in ("cpu_milli", "memory_mib", "num_gpus", "model"):
        assert np.array_equal(getattr(n2, f), getattr(nodes, f)), f
    assert p2.names == pods.names and p2.gpu_spec == pods.gpu_spec
    for f in ("cpu_milli", "memory_mib", "num_gpus", "gpu_milli", "model_mask"):
        assert np.array_equal(getattr(p2, f), getattr(pods, f)), f
    for doc in yaml.safe_load_all(docs):     # what kubectl apply --dry-run=client checks
        assert doc["apiVersion"] == "v1" and doc["kind"] in ("Node", "Pod")
        assert objects.DNS_SUBDOMAIN.fullmatch(doc["metadata"]["name"])
        if doc["kind"] == "Pod":
            res = doc["spec"]["containers"][0]["resources"]
            assert res["requests"] == res["limits"] and set(res["requests"]) == {"cpu", "memory"}


def dataclass_take(pods, idx):
    import dataclasses
    return dataclasses.replace(
        pods, names=tuple(pods.names[i] for i in idx), gpu_spec=tuple(pods.gpu_spec[i] for i in idx),
        **{f: getattr(pods, f)[idx] for f in ("cpu_milli", "memory_mib", "num_gpus",
                                              "gpu_milli", "model_mask")})


def test_export_command_writes_nodes_and_pods(tmp_path):
    from vte.openb.kube.__main__ import main
    main(["export", "--pods", "default", "--out", str(tmp_path / "out"),
          "--scheduler-name", "vte-scheduler"])
    text = (tmp_path / "out" / "pods.yaml").read_text()
    assert text.count("kind: \"Pod\"") == 8152 == text.count("schedulerName: \"vte-scheduler\"")
    assert (tmp_path / "out" / "nodes.yaml").read_text().count("kind: \"Node\"") == 1213
    with pytest.raises(ValueError, match="DNS"):
        objects._check_name("Bad_Name", "pod")


# --- the protocol ------------------------------------------------------------------------

def test_payloads_of_the_simulators_example_match_types_go(trace, typical):
    twin, client = make_client(typical, trace[0].models)
    with client:
        args = {"Pod": pod("p", cpu="1", memory="1Gi"), "Nodes": SIMULATOR_NODES, "NodeNames": None}
        assert tuple(args) == EXTENDER_ARGS
        f = client.post("/vte/filter", json=args)
        assert f.status_code == 200 and tuple(f.json()) == EXTENDER_FILTER_RESULT
        assert f.json()["Error"] == "" and f.json()["NodeNames"] is None
        assert f.json()["Nodes"]["items"] == SIMULATOR_NODES["items"]     # as sent
        pr = client.post("/vte/prioritize", json=args)
        assert pr.status_code == 200
        assert [tuple(h) for h in pr.json()] == [HOST_PRIORITY] * 2
        assert sorted(h["Score"] for h in pr.json()) == [9, 10]   # one chosen; the other next
        assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in pr.json())
        bind = {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "node-pwzdq"}
        assert tuple(bind) == EXTENDER_BINDING_ARGS
        b = client.post("/vte/bind", json=bind)
        assert b.status_code == 200 and tuple(b.json()) == EXTENDER_BINDING_RESULT
        assert b.json() == {"Error": ""}
        assert twin.allocation() == {"uid-p": ("node-pwzdq", ())}


def test_gpu_filter_names_every_dropped_node_and_binds_gpus(trace, typical):
    nodes = [gpu_node("a", 2), gpu_node("b", 8, model="T4"), gpu_node("c", 1), gpu_node("d", 0)]
    twin, client = make_client(typical, trace[0].models, nodes=nodes)
    with client:
        p = pod("p", count="2", milli="1000", models="V100M16")
        f = client.post("/vte/filter", json={"Pod": p, "NodeNames": ["a", "b", "c", "d", "zz"]}).json()
        assert f["Nodes"] is None and f["NodeNames"] == ["a"] and f["Error"] == ""
        assert set(f["FailedAndUnresolvableNodes"]) == {"b", "c", "d", "zz"}
        assert "unknown" in f["FailedAndUnresolvableNodes"]["zz"]
        assert "T4" in f["FailedAndUnresolvableNodes"]["b"]
        pr = client.post("/vte/prioritize", json={"Pod": p, "NodeNames": ["a", "zz"]}).json()
        assert pr == [{"Host": "a", "Score": 10}, {"Host": "zz", "Score": 0}]
        assert client.post("/vte/bind", json={"PodName": "p", "PodUID": "uid-p", "Node": "a"}).json() == {"Error": ""}
        assert twin.allocation()["uid-p"] == ("a", (0, 1))
        # node a is full now: resolvable by preemption, so FailedNodes
        q = pod("q", count="1", milli="500")
        f = client.post("/vte/filter", json={"Pod": q, "NodeNames": ["a"]}).json()
        assert "insufficient GPU" in f["FailedNodes"]["a"]
        b = client.post("/vte/bind", json={"PodName": "q", "PodUID": "uid-q", "Node": "a"}).json()
        assert "no longer fits" in b["Error"]
        b = client.post("/vte/bind", json={"PodName": "never", "PodUID": "x", "Node": "a"}).json()
        assert "seen by no filter" in b["Error"]


BAD_BODIES = [b"", b"not json", b"[]", b"17", b'{"Pod": 3, "NodeNames": []}',
              b'{"Pod": {}, "NodeNames": []}', b'{"Pod": {"metadata": {"name": "p"}}}',
              b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "a"}',
              b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {}}]}}',
              b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [7]}}',
              b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": '
              b'{"requests": {"cpu": "1Q"}}}]}}, "NodeNames": []}',
              b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": '
              b'{"name": "n"}, "status": {"allocatable": {"memory": "lots"}}}]}}',
              b'\xff\xfe', b'{"a": ' * 5000]


def test_malformed_bodies_get_an_error_never_a_500(trace, typical):
    _, client = make_client(typical, trace[0].models)
    with client:
        for body in BAD_BODIES:
            f = client.post("/vte/filter", content=body)
            assert f.status_code == 200 and f.json()["Error"], body
            assert tuple(f.json()) == EXTENDER_FILTER_RESULT
            p = client.post("/vte/prioritize", content=body)
            assert p.status_code == 400 and p.json()["Error"], body
            b = client.post("/vte/bind", content=body)
            assert b.status_code == 200 and b.json()["Error"], body
        f = client.post("/vte/filter", content=BAD_BODIES[-2]).json()["Error"]
        assert "memory" in client.post("/vte/filter", content=BAD_BODIES[-3]).json()["Error"]
        assert "1Q" in client.post("/vte/filter", content=BAD_BODIES[-4]).json()["Error"]
        assert f


def test_request_size_limit_and_health():
    import vte.openb.kube.extender as ext
    twin = types.SimpleNamespace(num_nodes=0, bound={}, compiled=set(), warm=lambda sizes: 0.0)
    app = create_app(Extender(twin), "fgd", url_prefix="vte/", max_body_bytes=100)
    with TestClient(app) as client:
        assert client.post("/vte/filter", content=b"x" * 101).status_code == 413
        for _ in range(100):
            if client.get("/health").status_code == 200:
                break
            time.sleep(0.05)
        health = client.get("/vte/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
    assert ext.FILTER_KEYS == EXTENDER_FILTER_RESULT


# --- the state ---------------------------------------------------------------------------

def test_snapshot_pods_take_their_annotated_or_least_sufficient_gpus(trace, typical):
    twin = Twin(POLICIES["fgd"], typical, trace[0].models)
    items = [gpu_node("a", 4), gpu_node("b", 2),
             pod("x", count="1", milli="300", node="a", index="2", phase="Running"),
             pod("y", count="1", milli="500", node="a", phase="Running"),        # no index
             pod("z", count="2", node="a"),                                       # whole GPUs
             pod("done", count="1", milli="1000", node="b", phase="Succeeded"),   # terminal
             pod("pending", count="1", milli="1000")]                             # not bound
    nodes, pods = objects.split(items)
    assert [p.name for p in pods] == ["x", "y", "z", "pending"]
    for n in nodes:
        twin.add_node(n)
    for p in pods:
        assert twin.observe(p) is None
    assert twin.allocation() == {"uid-x": ("a", (2,)), "uid-y": ("a", (2,)),
                                 "uid-z": ("a", (0, 1))}
    assert twin.used_milli() == 2800
    assert twin.observe(objects.pod_row(pod("y", count="1", milli="500", node="a",
                                            phase="Succeeded"))) is None
    assert twin.release("uid-x") and not twin.release("uid-x") and twin.used_milli() == 2000
    assert "unknown" in twin.observe(objects.pod_row(pod("w", node="elsewhere")))


def test_host_filter_agrees_with_the_replays_feasibility(trace, typical):
    nodes, pods = trace
    sub = nodes.take(range(0, 1213, 40))
    twin = Twin(POLICIES["fgd"], typical, nodes.models)
    for row in objects.split(objects.node_objects(sub, pod_limit=1001))[0]:
        twin.add_node(row)
    rng = np.random.default_rng(0)
    rows = objects.split(objects.pod_objects(pods))[1]
    spec = cluster.make_spec(sub, typical)
    for k in rng.choice(len(rows), 60, replace=False):
        node = int(rng.integers(len(sub)))
        gpus, _ = twin.choose_gpus(rows[k], sub.names[node])
        if gpus is not None:
            twin.bind(rows[k], sub.names[node], gpus)
    n = len(sub)
    state = cluster.State(
        cpu_free=twin.cpu_cap[:n] - twin.cpu_used[:n].astype(np.int32),
        mem_free=twin.mem_cap[:n] - twin.mem_used[:n].astype(np.int32),
        gpu_free=np.where(np.arange(8)[:, None] < sub.num_gpus, 1000 - twin.gpu_used[:, :n], 0),
        pods=twin.pods[:n], classes=np.zeros(n, np.int32), frag=np.zeros(n, np.float32),
        rank=np.arange(n, dtype=np.int32), arrived=np.int32(0))
    for k in range(0, len(rows), 97):
        r = rows[k]
        mask, _ = twin.mask(r)
        p = cluster.Pod(cpu_milli=r.cpu_milli, memory_mib=r.memory_mib, num_gpus=r.num_gpus,
                        gpu_milli=r.gpu_milli, model_mask=mask, valid=True)
        ours = [x is None for x in twin.reasons(r, np.arange(n))]
        assert ours == np.asarray(cluster.feasible(state, p, spec)).tolist()


def test_buckets_and_gpu_rule():
    assert [bucket(n, True) for n in (0, 1, 8, 9, 1213)] == [8, 8, 8, 16, 2048]
    assert bucket(1213, False) == 1213
    assert least_sufficient(np.array([1000, 400, 1000, 700]), 300, 1) == (1,)
    assert least_sufficient(np.array([1000, 400, 1000, 700]), 1000, 2) == (0, 2)
    assert least_sufficient(np.array([1000, 400]), 1000, 2) == ()


# --- the kube client: binder and watch (a fake API server) -------------------------------

class FakeApi:
    def __init__(self, pods=(), nodes=(), fail=False):
        self.calls, self.pods, self.nodes, self.fail = [], list(pods), list(nodes), fail
        self.api_client = types.SimpleNamespace(sanitize_for_serialization=lambda o: o)

    def patch_namespaced_pod(self, name, namespace, body):
        self.calls.append(("patch", name, namespace, body))

    def create_namespaced_binding(self, namespace, body, **kw):
        if self.fail:
            raise RuntimeError("Forbidden: pods/binding")
        self.calls.append(("binding", namespace, body, kw))

    def list_node(self):
        return types.SimpleNamespace(items=self.nodes)

    def list_pod_for_all_namespaces(self, **kw):
        return types.SimpleNamespace(items=self.pods,
                                     metadata=types.SimpleNamespace(resource_version="7"))

    def read_namespaced_pod(self, name, namespace):
        return next(p for p in self.pods if p["metadata"]["name"] == name)


def test_binder_patches_the_gpu_index_then_creates_the_binding(trace, typical):
    pytest.importorskip("kubernetes")
    from vte.openb.kube.client import Binder
    api = FakeApi()
    twin, client = make_client(typical, trace[0].models, binder=Binder(api, Convention()),
                               nodes=[gpu_node("a", 4)])
    with client:
        p = pod("p", count="2")
        client.post("/vte/filter", json={"Pod": p, "NodeNames": ["a"]})
        assert client.post("/vte/bind", json={"PodName": "p", "PodNamespace": "default",
                                              "PodUID": "uid-p", "Node": "a"}).json() == {"Error": ""}
    patch, binding = api.calls
    assert patch == ("patch", "p", "default",
                     {"metadata": {"annotations": {"alibabacloud.com/gpu-index": "0-1"}}})
    assert binding[2]["target"] == {"apiVersion": "v1", "kind": "Node", "name": "a"}
    assert binding[2]["metadata"]["uid"] == "uid-p" and binding[3] == {"_preload_content": False}
    assert twin.allocation() == {"uid-p": ("a", (0, 1))}
    # a failing API server: Error, nothing recorded
    api2 = FakeApi(fail=True)
    twin2, client2 = make_client(typical, trace[0].models, binder=Binder(api2, Convention()),
                                 nodes=[gpu_node("a", 4)])
    with client2:
        client2.post("/vte/filter", json={"Pod": p, "NodeNames": ["a"]})
        err = client2.post("/vte/bind", json={"PodName": "p", "PodUID": "uid-p", "Node": "a"}).json()
    assert "Forbidden" in err["Error"] and twin2.allocation() == {}


def test_watch_counts_pods_bound_and_deleted_by_others(trace, typical, monkeypatch):
    kubernetes = pytest.importorskip("kubernetes")
    from vte.openb.kube.client import PodWatcher
    bound = pod("o", count="1", milli="500", node="a", index="3", phase="Running")
    api = FakeApi(pods=[bound], nodes=[gpu_node("a", 4)])
    later = pod("l", count="1", milli="1000", node="a", phase="Running")
    events = [{"type": "ADDED", "object": later}, {"type": "DELETED", "object": bound}]
    streamed = threading.Event()

    class FakeWatch:
        def stream(self, fn, **kw):
            assert kw["resource_version"] == "7"
            yield from events
            streamed.set()
            watcher.stop()

        def stop(self):
            pass

    monkeypatch.setattr(kubernetes.watch, "Watch", FakeWatch)
    twin = Twin(POLICIES["fgd"], typical, trace[0].models)
    watcher = PodWatcher(api, twin, Convention()).start()
    assert watcher.synced.wait(10) and streamed.wait(10)
    watcher.thread.join(10)
    assert twin.allocation() == {"uid-l": ("a", (0,))}


# --- HTTPS -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_https_serves_health(tmp_path):
    import ssl
    import urllib.request

    from vte.openb.kube import cli
    from vte.serve import server as srv
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                           "-keyout", str(key), "-out", str(cert), "-days", "1",
                           "-subj", "/CN=localhost"], capture_output=True)
    if made.returncode != 0:
        pytest.skip("openssl cannot make a test certificate here")
    twin = types.SimpleNamespace(num_nodes=0, bound={}, compiled=set(), warm=lambda sizes: 0.0)
    app = create_app(Extender(twin), "fgd")
    port = free_port()
    sock = srv.bind("127.0.0.1", port)
    args = cli.parser().parse_args(["--policy", "fgd", "--tls-cert", str(cert),
                                    "--tls-key", str(key)])
    threading.Thread(target=cli.serve, args=(app, sock, args), daemon=True).start()
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = False
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/health", context=context) as r:
                assert r.status == 200 and json.load(r)["status"] == "ok"
                break
        except OSError:
            time.sleep(0.1)
    else:
        pytest.fail("no HTTPS answer")


def test_cli_builds_the_twin_from_a_snapshot(tmp_path):
    from vte.openb.kube import cli
    snapshot = {"apiVersion": "v1", "kind": "List", "items": [
        gpu_node("a", 4), gpu_node("b", 2, model="T4"),
        pod("x", count="1", milli="300", node="a", index="1", phase="Running")]}
    (tmp_path / "s.json").write_text(json.dumps(snapshot))
    args = cli.parser().parse_args(["--policy", "best_fit", "--snapshot", str(tmp_path / "s.json"),
                                    "--url-prefix", "/vte", "--gpu-index-key",
                                    "alibabacloud.com/gpu-index"])
    app, name, binder = cli.build(args)
    twin = app.state.extender.twin
    assert (name, binder, twin.num_nodes) == ("best_fit", None, 2)
    assert twin.allocation() == {"uid-x": ("a", (1,))}
    with pytest.raises(ValueError, match="--policy"):
        cli.build(cli.parser().parse_args(["--policy", "nonsense"]))


def test_nodes_in_full_as_go_writes_them_take_the_fast_path(trace, typical):
    from vte.openb.kube.extender import split_nodes
    nodes = [gpu_node("a", 2), gpu_node("b", 4)]
    nodes[1]["metadata"]["ownerReferences"] = [{"kind": "x"}, {"kind": "y"}]   # nested objects
    nodes[1]["status"]["note"] = 'a string with },{"kind": inside'
    body = json.dumps({"Pod": pod("p", count="1", milli="500"), "Nodes": {"metadata": {}, "items": nodes},
                       "NodeNames": None}, separators=(",", ":")).encode()
    rest, raws = split_nodes(body)
    assert [json.loads(r) for r in raws] == nodes and json.loads(rest)["Nodes"] is None
    assert split_nodes(json.dumps({"Pod": {}, "Nodes": {"items": nodes}}).encode()) is None
    tricky = copy.deepcopy(nodes)
    for n in tricky:                      # every object's first key is "kind", nested ones too
        n.pop("apiVersion")
    tricky[0]["status"]["list"] = [{"kind": 1}, {"kind": 2}]
    slow_body = json.dumps({"Pod": pod("q"), "Nodes": {"items": tricky}}, separators=(",", ":")).encode()
    assert any(r.count(b"{") != r.count(b"}") for r in split_nodes(slow_body)[1])
    _, client = make_client(typical, trace[0].models)
    with client:
        for b, expect in ((body, nodes), (slow_body, tricky)):
            f = client.post("/vte/filter", content=b)
            assert f.json()["Error"] == "" and f.json()["Nodes"]["items"] == expect
            assert client.post("/vte/prioritize", content=b).status_code == 200


# GPU models OpenB lacks, as an operator gives them (`VTE_OPENB_GPU_MODELS`'s file), and a
# node of each.
NEW_MODELS = {"H100-80GB": {"memory_gib": 80, "idle_w": 60, "max_w": 700},
              "A100-40GB": {"memory_gib": 40, "idle_w": 50, "max_w": 400}}


def new_model_nodes():
    return [gpu_node("h", 8, model="H100-80GB", cpu="96", memory="1024Gi"),
            gpu_node("a", 4, model="A100-40GB")]


def test_a_cluster_of_other_gpu_models_is_served_by_the_agnostic_network_only(tmp_path,
                                                                               monkeypatch):
    """An operator's cluster of H100 and A100 nodes, the models added to the per-model table
    by the JSON file the environment variable names: the extender serves it with the zoo's
    model-agnostic network (it filters, prioritizes and binds), and refuses the one-hot
    network before serving, naming what that one lacks."""
    from vte.openb import power
    from vte.openb.kube import cli
    monkeypatch.setattr(power, "GPU_MODELS", dict(power.GPU_MODELS))
    monkeypatch.setattr(power, "GPU_WATTS", dict(power.GPU_WATTS))
    table = tmp_path / "models.json"
    table.write_text(json.dumps(NEW_MODELS))
    assert power.load_gpu_models(str(table)) == ["H100-80GB", "A100-40GB"]
    snapshot = {"apiVersion": "v1", "kind": "List", "items": new_model_nodes() + [
        pod("run", count="1", milli="1000", node="a", index="0", phase="Running")]}
    (tmp_path / "s.json").write_text(json.dumps(snapshot))
    flags = ["--snapshot", str(tmp_path / "s.json"), "--typical", "snapshot",
             "--url-prefix", "/vte"]
    with pytest.raises(ValueError, match=r"'zoo:openb-evidence': .* this one has 9 \(A100-40GB, "
                                         r"H100-80GB unknown to it\).* agnostic encoding"):
        cli.build(cli.parser().parse_args(["--policy", "zoo:openb-evidence"] + flags))
    app, name, _ = cli.build(cli.parser().parse_args(["--policy", "zoo:openb-agnostic"] + flags))
    with TestClient(app) as client:
        p = pod("p", count="2", milli="1000", models="H100-80GB|A100-40GB")
        f = client.post("/vte/filter", json={"Pod": p, "NodeNames": ["h", "a"]}).json()
        assert f["Error"] == "" and f["NodeNames"] == ["h", "a"]
        pr = client.post("/vte/prioritize", json={"Pod": p, "NodeNames": ["h", "a"]}).json()
        assert sorted(s["Host"] for s in pr) == ["a", "h"]
        assert max(s["Score"] for s in pr) == 10 and all(0 <= s["Score"] <= 10 for s in pr)
        best = max(pr, key=lambda s: s["Score"])["Host"]
        b = client.post("/vte/bind", json={"PodName": "p", "PodUID": "uid-p", "Node": best})
        assert b.json() == {"Error": ""}
        assert app.state.extender.twin.allocation()["uid-p"][0] == best


@pytest.mark.slow   # two server processes: imports, the network's scoring compiled once
def test_the_extender_command_serves_new_gpu_models_and_restarts_from_its_cache(tmp_path):
    """`python -m vte.serve --protocol kube-extender` as an operator starts it on a cluster
    of H100 and A100 nodes, the models given by the file `VTE_OPENB_GPU_MODELS` names: with
    `zoo:openb-agnostic` it answers /health once the snapshot's scoring is compiled, and
    prioritizes a pod; that program is kept in `--compilation-cache`, and a restart reads it
    back (JAX logs each persistent-cache hit with JAX_LOG_COMPILES)."""
    import os
    import sys
    import urllib.request
    models = tmp_path / "models.json"
    models.write_text(json.dumps(NEW_MODELS))
    snapshot = {"apiVersion": "v1", "kind": "List", "items": new_model_nodes()}
    (tmp_path / "s.json").write_text(json.dumps(snapshot))
    cache = tmp_path / "jax"
    env = {**os.environ, "VTE_OPENB_GPU_MODELS": str(models), "JAX_LOG_COMPILES": "1",
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}

    def serve():
        port = free_port()
        log = tmp_path / f"server_{port}.log"          # a file: a pipe nobody reads fills up
        with log.open("w") as out:                      # the child keeps its own copy
            server = subprocess.Popen(
                [sys.executable, "-m", "vte.serve", "--protocol", "kube-extender", "--policy",
                 "zoo:openb-agnostic", "--snapshot", str(tmp_path / "s.json"), "--port",
                 str(port), "--compilation-cache", str(cache)], env=env, stdout=out,
                stderr=subprocess.STDOUT)
        try:
            for _ in range(900):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health") as r:
                        assert json.load(r)["status"] == "ok"
                        break
                except OSError:                             # refused, or 503 while warming
                    assert server.poll() is None, log.read_text()
                    time.sleep(0.1)
            else:
                pytest.fail("no /health answer in 90 s")
            p = pod("p", count="2", milli="1000", models="H100-80GB|A100-40GB")
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/prioritize", method="POST",
                data=json.dumps({"Pod": p, "NodeNames": ["h", "a"]}).encode(),
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request) as r:
                scores = json.load(r)
            assert sorted(s["Host"] for s in scores) == ["a", "h"]
            assert max(s["Score"] for s in scores) == 10
        finally:
            server.kill()
            server.wait()
        return log.read_text()

    first = serve()
    assert any(f.name.startswith("jit_") for f in cache.iterdir())
    hit = "Persistent compilation cache hit for 'jit__lambda'"     # the jitted scoring
    assert hit not in first
    assert hit in serve()                                    # the restart read it back
