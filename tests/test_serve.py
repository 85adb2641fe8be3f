"""The DECICE server: conversion round trip, the HTTP contract, sequential placement,
concurrent requests, export, and loading a trained run."""

import json
import re
import subprocess
import sys
import threading
import uuid

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("fastapi")   # the dev extra installs it
from fastapi.testclient import TestClient  # noqa: E402

import vte  # noqa: E402
from vte.cluster.decice import convert, schemas as S  # noqa: E402
from vte.cluster.decice.app import API_KEY_HEADER, create_app  # noqa: E402
from vte.cluster.decice.place import OPTIMAL, Placer, make_placer  # noqa: E402

PARAMS = vte.EnvParams(num_nodes=8, queue_len=4, num_sites=2, slots_per_node=4, episode_len=6)
KEY = "test-key"
_reset, _step = jax.jit(vte.reset), jax.jit(vte.step)
_OPTIMAL = Placer(OPTIMAL, PARAMS)       # one placer, so its compilations are shared


def _state(seed: int, steps: int = 5):
    """A state with running jobs: `steps` optimal decisions after a reset."""
    _, state = _reset(jax.random.PRNGKey(seed), PARAMS)
    for i in range(steps):
        _, state, *_ = _step(jax.random.PRNGKey(100 + i), state, state.scores.optimum, PARAMS)
    return jax.device_get(state)


def _task(i: int, cpu: int, mem_mib: int = 1024, gpu=None) -> dict:
    req = {"required_cpu": cpu, "required_memory": mem_mib}
    if gpu:
        req["required_gpu"] = gpu
    return {"id": str(uuid.UUID(int=i + 1)), "requirements": req}


def _node(node_id: str, cores: float, mem_gib: float = 64, util: float = 0.0, **info) -> dict:
    return {"id": node_id, "node_info": info,
            "metrics": {"cpu_cores": cores, "mem_total": mem_gib, "util": util, "mem_util": 0.0,
                        "network_bandwidth_mbps": 1000.0, "free_disk_gb": 100.0,
                        "total_disk_gb": 100.0}}


def _body(tasks, nodes) -> dict:
    return {"tasks": tasks, "cluster": {"vertexpools": [{"id": "pool-a", "nodes": nodes}]}}


@pytest.fixture(scope="module")
def client():
    placer, name = make_placer("first_fit")
    app = create_app(placer, name, api_key=KEY, window_ms=20.0)
    with TestClient(app) as c:
        yield c


def _converted(placer, body) -> tuple[list, list]:
    """([view], [requests]) of one request body, as the app converts it."""
    request = S.ScheduleRequest.model_validate(body)
    view = convert.cluster_view(request.cluster, placer.params)
    return [view], [convert.task_requests(request.tasks, view)[0]]


def _post(client, body, key=KEY):
    headers = {} if key is None else {API_KEY_HEADER: key}
    return client.post("/schedule", json=body, headers=headers)


# --------------------------------------------------------------------------
# Conversion
# --------------------------------------------------------------------------

def test_round_trip_keeps_every_reported_field():
    state = _state(0)
    cs = S.ClusterState.model_validate_json(convert.cluster_state(state).model_dump_json())
    view = convert.cluster_view(cs, PARAMS)
    idx = np.array([int(k.split("-")[1]) for k in view.node_ids])      # view row -> vte node
    real = len(idx)
    assert real == int(np.sum(state.cluster.mask)) and view.cluster.mask[:real].all()
    assert not view.cluster.mask[real:].any()
    for f in ("tier", "gpu_model", "labels", "site", "capacity", "speed", "bandwidth",
              "power_idle", "power_peak", "failure_rate"):
        np.testing.assert_array_equal(getattr(view.cluster, f)[..., :real],
                                      np.asarray(getattr(state.cluster, f))[..., idx], err_msg=f)
    np.testing.assert_array_equal(view.cluster.link_delay[:2, :2], state.cluster.link_delay)
    for f in ("power", "up", "jobs"):
        np.testing.assert_array_equal(getattr(view.twin, f)[:real],
                                      np.asarray(getattr(state.twin, f))[idx], err_msg=f)
    for f in ("util", "mem_util"):     # percent and back: float32 rounding at most
        np.testing.assert_allclose(getattr(view.twin, f)[:real],
                                   np.asarray(getattr(state.twin, f))[idx], rtol=1e-6)
    # GPUs and disk exactly; cores and memory derived from utilisation (not overcommitted).
    np.testing.assert_array_equal(view.twin.free[2:, :real], state.twin.free[2:, idx])
    np.testing.assert_allclose(view.twin.free[:2, :real], state.twin.free[:2, idx], atol=1e-3)
    assert int(view.twin.jobs.sum()) > 0                # running pods became jobs
    # Tasks: every field of the valid requests.
    ids = [uuid.UUID(int=k) for k in range(PARAMS.queue_len)]
    tasks = convert.tasks_from_requests(state.queue, ids)
    reqs, reasons = convert.task_requests(tasks, view)
    valid = np.flatnonzero(state.queue.valid)
    assert len(valid) == len(tasks)
    # A task no node can host (a GPU model on no node) is an invalid slot, with its reason.
    hostless = [r is not None for r in reasons]
    np.testing.assert_array_equal(reqs.valid[:len(valid)], ~np.array(hostless, bool))
    assert all("GPU model" in r for r in reasons if r is not None)
    for f in ("demand", "work", "gpu_models", "required", "rejected", "preferred", "origin",
              "latency_bound", "data_gb"):
        np.testing.assert_array_equal(getattr(reqs, f)[:len(valid)],
                                      np.asarray(getattr(state.queue, f))[valid], err_msg=f)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_optimal_on_the_converted_cluster_is_the_environment_optimum(seed):
    state = _state(seed)
    state = state.replace(queue=state.queue.replace(valid=np.arange(PARAMS.queue_len) < 1))
    ids = [uuid.UUID(int=k) for k in range(PARAMS.queue_len)]
    request = S.ScheduleRequest(tasks=convert.tasks_from_requests(state.queue, ids),
                                cluster=convert.cluster_state(state))
    view = convert.cluster_view(request.cluster, PARAMS)
    nodes, costs, _ = _OPTIMAL([view], [convert.task_requests(request.tasks, view)[0]])
    expected = int(state.scores.optimum)     # the environment's optimum of this state
    if expected == PARAMS.num_nodes:
        assert nodes[0, 0] == -1
    else:
        assert view.node_ids[nodes[0, 0]] == f"node-{expected}"
        np.testing.assert_allclose(costs[0, 0], state.scores.cost[expected], rtol=1e-5)


def test_defaults_for_what_decice_does_not_report():
    cs = S.ClusterState.model_validate(_body([], [
        _node("a", 8, gpu_model="nvidia-a100"),
        {"id": "b", "metrics": {"cpu_cores": 4}}])["cluster"])
    view = convert.cluster_view(cs, PARAMS)
    assert view.num_nodes == convert.NODE_BUCKETS[0] and view.num_sites == convert.SITE_BUCKETS[0]
    assert view.cluster.gpu_model[0] == 2 and view.cluster.capacity[2, 0] == 1   # one A100
    assert view.twin.up[0] and not view.twin.up[1]        # b reports no memory: accepts nothing
    assert view.cluster.labels[0] & (1 << vte.cluster.catalogue.LABELS.index("gpu"))
    assert view.cluster.link_delay[0, 1] == convert.DEFAULT_LINK_DELAY_MS
    # No power reported: the power model at the reported utilisation (idle at 0 %).
    assert view.twin.power[0] == view.cluster.power_idle[0]


def test_what_decice_accepts_and_vte_cannot_use_is_ignored_not_refused():
    cs = S.ClusterState.model_validate({
        "vertexpools": [{"id": "p", "nodes": [
            _node("v100", 8, gpu_model="nvidia-v100", gpu_count=4, labels=["quantum", "ssd"]),
            _node("a100", 8, gpu_model="nvidia-a100"),
            {"name": None, "metrics": {"cpu_cores": 4, "mem_total": 8}},      # no id: left out
            {"id": "neg", "metrics": {"cpu_cores": 4, "mem_total": 8, "total_disk_gb": -1,
                                      "network_bandwidth_mbps": -1}}]}],
        "links": [{"vertexpool_a_id": "p", "vertexpool_b_id": "nowhere", "network_delay_ms": 3},
                  {"vertexpool_a_id": "p", "vertexpool_b_id": "p", "network_delay_ms": -1}]})
    view = convert.cluster_view(cs, PARAMS)
    assert view.node_ids == ["v100", "a100", "neg"]
    # A GPU model vte does not know: the node's GPUs are not offered, its CPUs are.
    assert view.cluster.gpu_model[0] == 0 and view.cluster.capacity[2, 0] == 0
    assert view.cluster.capacity[0, 0] == 8
    labels = view.cluster.labels[0]
    assert labels & (1 << vte.cluster.catalogue.LABELS.index("ssd"))       # a vte label is kept
    assert view.cluster.gpu_model[1] == 2                           # A100 known
    # Negative bandwidth and disk read as not reported; both links ignored.
    assert view.cluster.capacity[3, 2] == 0
    assert view.cluster.bandwidth[2] > 0
    assert view.cluster.link_delay[0, 0] == vte.cluster.catalogue.INTRA_SITE_DELAY_MS
    # Tasks no node can host carry their reason and are invalid slots.
    tasks = [S.Task.model_validate(t) for t in (
        _task(0, 1, gpu="nvidia-t4"), _task(1, 1, gpu="nvidia-v100"), _task(2, 1, gpu="A100"),
        {**_task(3, 1), "vte": {"origin_pool": "nowhere"}},
        {**_task(4, 1), "time_limit": -5}, {**_task(5, 1), "time_limit": 1.5})]
    reqs, reasons = convert.task_requests(tasks, view)
    assert "nvidia-t4" in reasons[0] and "nvidia-v100" in reasons[1] and reasons[2] is None
    assert "'nowhere'" in reasons[3] and reasons[4] is None
    assert list(reqs.valid[:6]) == [False, False, True, False, True, True]
    assert reqs.work[4] == convert.DEFAULT_WORK_S and reqs.work[5] == np.float32(1.5)
    # The one conversion error left: more than the largest bucket, naming the count.
    with pytest.raises(convert.ConversionError, match="5000 is too many"):
        convert.bucket(5000, convert.NODE_BUCKETS, "cluster nodes")


# --------------------------------------------------------------------------
# The HTTP contract
# --------------------------------------------------------------------------

def test_health(client):
    r = client.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["overall_status"] == "healthy"
    assert body["components"]["policy"] == {"status": "OK", "details": "first_fit"}


def test_201_places_and_names_the_strategy(client):
    r = _post(client, _body([_task(0, 2)], [_node("a", 1), _node("b", 8)]))
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["placements"] == [{"task_id": str(uuid.UUID(int=1)), "target_node_ids": ["b"],
                                  "strategy_used": "first_fit"}]
    assert out["scheduling_duration_ms"] > 0


@pytest.mark.parametrize("key", [None, "wrong"])
def test_403_without_the_key(client, key):
    r = _post(client, _body([_task(0, 1)], [_node("a", 8)]), key=key)
    assert r.status_code == 403
    assert r.json()["detail"][0]["loc"] == ["header", API_KEY_HEADER]


def test_422_malformed_body_names_the_field(client):
    body = _body([_task(0, 1)], [_node("a", 8)])
    body["cluster"]["vertexpools"][0]["nodes"][0]["metrics"]["util"] = 140.0
    r = _post(client, body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][-1] == "util"
    body = _body([_task(0, 1)], [_node("a", 8)])
    body["cluster"]["vertexpools"][0]["nodes"][0]["metrics"]["gpu_temp"] = 40   # no extra keys
    r = _post(client, body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "gpu_temp"
    r = client.post("/schedule", content=b"{not json", headers={API_KEY_HEADER: KEY})
    assert r.status_code == 422


@pytest.mark.parametrize("path, value", [
    (("tasks", 0, "requirements", "required_cpu"), 10 ** 400),
    (("tasks", 0, "requirements", "required_memory"), 10 ** 400),
    (("tasks", 0, "time_limit"), 10 ** 400),
    (("cluster", "vertexpools", 0, "nodes", 0, "metrics", "cpu_cores"), 1e308),
    (("cluster", "vertexpools", 0, "nodes", 0, "metrics", "mem_total"), 1e39),
    (("cluster", "vertexpools", 0, "nodes", 0, "node_info", "speed"), 1e300),
    (("cluster", "links"), [{"vertexpool_a_id": "pool-a", "vertexpool_b_id": "pool-a",
                             "network_delay_ms": 1e300}]),
    (("cluster", "lastUpdated"), float("inf")),
    (("cluster", "vertexpools", 0, "nodes", 0, "metrics", "util"), float("nan")),
])
def test_422_names_the_out_of_range_number(client, path, value):
    body = _body([_task(0, 1)], [_node("a", 8)])
    where = body
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    raw = json.dumps(body)           # Infinity and NaN as Python's JSON writes them
    r = client.post("/schedule", content=raw, headers={API_KEY_HEADER: KEY,
                                                        "content-type": "application/json"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert set(detail[0]) == {"type", "loc", "msg"}
    field = path[-1] if path[-1] != "links" else "network_delay_ms"
    assert field in detail[0]["loc"], detail


def test_tasks_no_node_can_host_are_answered_empty_with_the_reason(client):
    r = _post(client, _body([_task(0, 1, gpu="nvidia-t4"), _task(1, 2),
                             {**_task(2, 1), "vte": {"origin_pool": "elsewhere"}}],
                            [_node("a", 8, gpu_model="nvidia-a100")]))
    assert r.status_code == 201, r.text
    got = r.json()["placements"]
    assert got[0]["target_node_ids"] == [] and "nvidia-t4" in got[0]["reason"]
    assert got[1]["target_node_ids"] == ["a"] and "reason" not in got[1]
    assert got[2]["target_node_ids"] == [] and "'elsewhere'" in got[2]["reason"]
    # A cluster without nodes, repeated ids: accepted, as DECICE accepts them.
    r = _post(client, _body([_task(0, 1)], []))
    assert r.status_code == 201 and r.json()["placements"][0]["target_node_ids"] == []
    r = _post(client, _body([_task(0, 1), _task(0, 2)], [_node("a", 8), _node("a", 4)]))
    assert r.status_code == 201 and [p["target_node_ids"] for p in
                                     r.json()["placements"]] == [["a"], ["a"]]
    assert client.get("/health").status_code == 200         # still serving


def test_413_beyond_the_body_limit():
    placer, name = make_placer("first_fit")
    app = create_app(placer, name, max_body_bytes=2000)
    body = json.dumps(_body([_task(k, 1) for k in range(40)], [_node("a", 8)])).encode()
    assert len(body) > 2000
    with TestClient(app) as c:
        r = c.post("/schedule", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["detail"][0]["type"] == "too_large"

        def chunks():                 # no Content-Length: counted while reading
            yield body[:1500]
            yield body[1500:]
        r = c.post("/schedule", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413


def test_tasks_are_placed_on_the_cluster_the_previous_ones_left(client):
    # Node a has 8 free cores: it fits one 6-core task, not two. b has 4 cores.
    nodes = [_node("a", 8), _node("b", 4)]
    r = _post(client, _body([_task(0, 6), _task(1, 6), _task(2, 3)], nodes))
    assert r.status_code == 201
    got = [p["target_node_ids"] for p in r.json()["placements"]]
    assert got == [["a"], [], ["b"]]
    # The GPU: one A100 on a, so a second GPU task fits nowhere.
    nodes = [_node("a", 32, gpu_model="nvidia-a100", gpu_count=1), _node("b", 32)]
    r = _post(client, _body([_task(0, 1, gpu="nvidia-a100"), _task(1, 1, gpu="nvidia-a100")],
                            nodes))
    assert [p["target_node_ids"] for p in r.json()["placements"]] == [["a"], []]


def test_concurrent_requests_do_not_see_each_other(client):
    # Each request's cluster has one node that fits its 6-core task only; answers must
    # equal the answers of the same requests sent one by one.
    bodies = [_body([_task(0, 6), _task(1, 6)],
                    [_node(f"x{i}", 4), _node(f"y{i}", 6 + i % 3)]) for i in range(12)]
    serial = [_post(client, b).json()["placements"] for b in bodies]
    # A group no compiled batch size holds runs in parts at once (its shape compiles in
    # the background); compiled, it runs as one call.
    placer = client.app.state.batcher.placer
    placer.compile((16,) + placer.shape_of(*_converted(placer, bodies[0]))[1:])
    batches_before = client.app.state.batcher.batches
    results = [None] * len(bodies)

    def send(i):
        results[i] = _post(client, bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.status_code == 201 for r in results)
    assert [r.json()["placements"] for r in results] == serial
    assert all(p[0]["target_node_ids"] == [f"y{i}"] and p[1]["target_node_ids"] == []
               for i, p in enumerate(serial))
    # Micro-batching grouped some of them into one call.
    assert client.app.state.batcher.batches - batches_before < len(bodies)


def _same_answer_in_a_larger_shape(placer):
    """A request run in a larger node, site, task and batch bucket (padded with absent
    nodes and unused sites, `convert.pad_view`) gets the answer of its own shape."""
    body = _body([_task(0, 6), _task(1, 2), _task(2, 3, gpu="nvidia-a100")],
                 [_node("a", 4), _node("b", 8), _node("c", 16, util=50.0),
                  _node("g", 32, gpu_model="nvidia-a100", gpu_count=1)])
    views, reqs = _converted(placer, body)
    own = placer.shape_of(views, reqs)
    for shape in (own, (2, 64, 16, 8)):
        placer.compile(shape)
    small, large = placer.run(own, views, reqs), placer.run((2, 64, 16, 8), views, reqs)
    for a, b in zip(small, large):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("policy", ["first_fit", "kube_default", "min_completion_time", OPTIMAL])
def test_a_larger_shape_gives_the_same_answer(policy):
    _same_answer_in_a_larger_shape(_OPTIMAL if policy == OPTIMAL else make_placer(policy)[0])


@pytest.mark.parametrize("policy", ["random", "round_robin"])
def test_a_policy_that_counts_absent_nodes_runs_only_in_its_own_node_buckets(policy):
    """random draws among, and round_robin counts, the padded nodes too: their requests
    run only in compiled shapes of their own node and site buckets (a larger batch or task
    bucket still serves, and gives the same answer)."""
    placer = make_placer(policy)[0]
    assert not placer.pad_nodes and make_placer("first_fit")[0].pad_nodes
    body = _body([_task(k, 1) for k in range(20)], [_node(f"n{i}", 64) for i in range(12)])
    views, reqs = _converted(placer, body)
    own = placer.shape_of(views, reqs)                    # (1, 16, 4, 64)
    placer.compile((1, 64) + own[2:])
    assert placer.ready(own) is None                      # a larger node bucket: not used
    placer.compile((2,) + own[1:3] + (512,))
    assert placer.ready(own) == (2,) + own[1:3] + (512,)
    placer.compile(own)
    for a, b in zip(placer.run(own, views, reqs), placer.run((2,) + own[1:3] + (512,), views, reqs)):
        np.testing.assert_array_equal(a, b)


def test_a_trained_run_serves(tmp_path):
    from vte import checkpoint
    net = vte.SchedulerNet(hidden=8, head_hidden=8)
    obs, _ = vte.reset(jax.random.PRNGKey(0), PARAMS)
    variables = jax.jit(net.init)(jax.random.PRNGKey(1), obs)   # one program, not op by op
    run = tmp_path / "tiny"
    checkpoint.save_config(str(run), {"hidden": 8, "seeds": 1, "env": {
        "num_nodes": 8, "queue_len": 4, "episode_len": 6, "sample_weights": False,
        "weights": [1.0, 2.0, 1.0]}})
    stacked = jax.tree_util.tree_map(lambda x: np.asarray(x)[None], variables)
    import orbax.checkpoint as ocp
    with checkpoint.checkpoint_manager(str(run)) as mngr:
        mngr.save(1, args=ocp.args.Composite(policy=ocp.args.StandardSave(stacked)))
    placer, name = make_placer(str(run))
    _same_answer_in_a_larger_shape(placer)
    assert name == "tiny" and placer.params.queue_len == 4
    assert tuple(placer.params.weights) == (1.0, 2.0, 1.0)
    with TestClient(create_app(placer, name)) as c:
        r = c.post("/schedule", json=_body([_task(0, 6)], [_node("a", 4), _node("b", 8)]))
    assert r.status_code == 201
    # An untrained network may defer; it never picks a, which cannot hold the task.
    assert r.json()["placements"][0]["target_node_ids"] in ([], ["b"])
    with pytest.raises(ValueError, match="no_such_policy"):
        make_placer("no_such_policy")


# --------------------------------------------------------------------------
# Export and packaging
# --------------------------------------------------------------------------

def test_export_writes_requests_and_the_optimal_placements(tmp_path):
    from vte.cluster.export import main
    out = tmp_path / "decice"
    files = main(["decice", "--episodes", "2", "--out", str(out), "--warmup-steps", "3",
                  "--set", "num_nodes=8", "--set", "num_sites=2", "--set", "queue_len=4",
                  "--set", "episode_len=6"])
    assert len(files) == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"] == ["episode_00000.json", "episode_00001.json"]
    placer, name = make_placer(OPTIMAL)
    placer.params = PARAMS
    with TestClient(create_app(placer, name)) as c:
        for f in files:
            request = json.loads(open(f).read())
            S.ScheduleRequest.model_validate(request)
            optimal = json.loads(open(f.replace(".json", ".optimal.json")).read())
            r = c.post("/schedule", json=request)
            assert r.status_code == 201
            assert r.json()["placements"] == optimal["placements"]
            assert len(optimal["costs"]) == len(request["tasks"])


# `import vte` loads no server library: tests/test_edges.py checks fastapi and uvicorn
# among the optional libraries.


# --------------------------------------------------------------------------
# Operation: warm-up, the server process, its timeouts and limits
# --------------------------------------------------------------------------

class _GatedPlacer(Placer):
    """A placer whose compilations wait for `gate` (to observe the warm-up)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()

    def compile(self, shape):
        self.gate.wait(60)
        super().compile(shape)


def test_a_request_runs_in_a_larger_warm_shape_while_its_own_compiles():
    """After the warm-up, a request of a shape never compiled (more nodes, another site
    and task bucket) is answered at once in a larger compiled shape, with the answer of its
    own shape; its own shape compiles in the background, for next time."""
    placer = _GatedPlacer(OPTIMAL, PARAMS)
    placer.gate.set()
    large = (1, 64, 16, 8)
    with TestClient(create_app(placer, OPTIMAL, warmup=[(1, 16, 4, 1)],
                               warmup_later=[large])) as c:
        for _ in range(600):
            if large in placer.shapes:
                break
            threading.Event().wait(0.1)
        assert "1 of 1 largest buckets" in c.get("/health").json()["components"]["warmup"]["details"]
        placer.gate.clear()                       # no compile can finish from here on
        body = _body([_task(0, 6), _task(1, 6), _task(2, 3)],
                     [_node(f"n{i}", 4) for i in range(18)] + [_node("big", 8)])
        r = c.post("/schedule", json=body)
        assert r.status_code == 201
        got = [p["target_node_ids"] for p in r.json()["placements"]]
        assert got == [["big"], [], ["n0"]]
        assert placer.shapes == sorted([(1, 16, 4, 1), large])   # its own still compiling
        placer.gate.set()
    exact = Placer(OPTIMAL, PARAMS)
    views, reqs = _converted(exact, body)
    want = exact(views, reqs)
    assert [int(x) for x in want[0][0][:3]] == [18, -1, 0]


def test_health_is_503_until_warm_and_cold_shapes_do_not_block_warm_ones():
    placer = _GatedPlacer(OPTIMAL, PARAMS)
    shape = (1, 16, 4, 1)
    with TestClient(create_app(placer, OPTIMAL, warmup=[shape])) as c:
        r = c.get("/health")
        assert r.status_code == 503 and r.json()["components"]["warmup"]["status"] == "WARMING"
        placer.gate.set()
        for _ in range(600):
            if c.get("/health").status_code == 200:
                break
            threading.Event().wait(0.1)
        assert c.get("/health").json()["components"]["warmup"]["details"] == (
            "1 of 1 start-up shapes and 0 of 0 largest buckets compiled")
        # A cold shape (64 nodes) compiles on its own thread; while it is held, a warm
        # request (16 nodes, one task) is answered.
        placer.gate.clear()
        cold = {}
        big = threading.Thread(target=lambda: cold.setdefault("r", c.post("/schedule", json=_body(
            [_task(0, 1)], [_node(f"n{i}", 8) for i in range(20)]))))
        big.start()
        r = c.post("/schedule", json=_body([_task(0, 2)], [_node("a", 1), _node("b", 8)]))
        assert r.status_code == 201 and r.json()["placements"][0]["target_node_ids"] == ["b"]
        assert "r" not in cold                         # the cold one still waits
        placer.gate.set()
        big.join(120)
        assert cold["r"].status_code == 201


@pytest.mark.slow   # a process of its own, compiling without the cache
def test_a_compiler_process_compiles_the_same_program(monkeypatch):
    from vte.cluster.decice.place import CompilerProcess
    shape = (2, 16, 4, 8)
    body = _body([_task(0, 6), _task(1, 2), _task(2, 3)], [_node("a", 8), _node("b", 4)])
    request = S.ScheduleRequest.model_validate(body)
    view = convert.cluster_view(request.cluster, PARAMS)
    reqs, _ = convert.task_requests(request.tasks, view)
    local, _ = make_placer("first_fit")
    local.compile(shape)
    # Every program goes to the suite's persistent compilation cache, so the second child
    # would read the first one's executable back from it if it used the cache (such an
    # executable serializes without all of its functions and fails when run).
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    for _ in range(2):
        remote, _ = make_placer("first_fit")
        compiler = CompilerProcess("first_fit")
        try:
            remote.compile(shape, compiler)
            with pytest.raises(RuntimeError, match="failed on"):
                compiler((0, 16, 4, 8))                     # an error comes back, named
        finally:
            compiler.close()
        assert remote.shapes == local.shapes == [shape]
        for got, want in zip(remote.run(shape, [view], [reqs]),
                             local.run(shape, [view], [reqs])):
            np.testing.assert_array_equal(got, want)


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow   # the server in a process of its own
def test_the_server_process_binds_first_and_guards_its_connections():
    import socket
    import time
    import urllib.request
    with socket.socket() as taken:                      # a taken port fails before warm-up
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = subprocess.run([sys.executable, "-m", "vte.serve", "--policy", "first_fit",
                              "--port", str(taken.getsockname()[1])],
                             capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "cannot listen" in out.stderr and "compiling" not in out.stderr
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vte.serve", "--policy", "first_fit", "--port", str(port),
         "--warmup-nodes", "16", "--warmup-tasks", "1", "--warmup-batches", "1",
         "--header-timeout-s", "1", "--body-timeout-s", "1", "--max-connections", "3",
         "--log-level", "info"], stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health").status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        addr = ("127.0.0.1", port)
        head = (b"POST /schedule HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n")
        # A half-sent request head: the connection is closed after the header timeout.
        half = socket.create_connection(addr, timeout=10)
        half.sendall(head[:30])
        assert half.recv(100) == b""
        # A body that does not arrive: 408.
        slow = socket.create_connection(addr, timeout=10)
        slow.sendall(head + b"{")
        assert b" 408 " in slow.recv(1000).split(b"\r\n")[0]
        slow.close()
        # The connection limit: a fourth connection is closed at once.
        held = [socket.create_connection(addr, timeout=10) for _ in range(3)]
        extra = socket.create_connection(addr, timeout=10)
        t0 = time.monotonic()
        assert extra.recv(100) == b"" and time.monotonic() - t0 < 0.9   # before any timeout
        for s in held + [extra, half]:
            s.close()
        time.sleep(0.2)
        # A client that leaves during its upload: one INFO line, no traceback.
        gone = socket.create_connection(addr, timeout=10)
        gone.sendall(head + b'{"tasks": [')
        gone.close()
        time.sleep(0.5)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "no API key configured" in err
    assert "disconnected before sending its whole request" in err
    assert "Traceback" not in err and "ClientDisconnect" not in err


@pytest.mark.slow   # a process of its own
def test_help_is_readable():
    out = subprocess.run([sys.executable, "-m", "vte.serve", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "--max-body-bytes" in out and "\\\n" not in out and "\\ " not in out


# --------------------------------------------------------------------------
# Requests built the way DECICE's training-data generator builds them
# --------------------------------------------------------------------------

def decice_style_request(rng: np.random.Generator) -> dict:
    """A request following the conventions of DECICE's scenario generator: 10-50 nodes of
    three archetypes (compute, GPU with an A100 or H100, edge) dealt round-robin into 3
    pools, `location`/`rack` in node_info, random utilisation profiles, power reported 70 %
    of the time, no links; 5-20 tasks from five archetypes, some asking for nvidia-t4 (which
    no node has), with `time_limit`, `submission_time` and `system` beside the requirements
    and the task list repeated under `workloads`."""
    def pick(options):
        return options[int(rng.integers(len(options)))]

    nodes = []
    for i in range(int(rng.integers(10, 51))):
        kind = pick(["compute"] * 5 + ["gpu"] * 3 + ["edge"] * 2)
        cores, mem, disk, net, gpus, info = {
            "compute": ((16, 64), (64, 256), (512, 2048), (1000, 10000), [None],
                        {"location": "DC1"}),
            "gpu": ((32, 96), (128, 512), (1024, 4096), (10000, 40000),
                    ["nvidia-a100", "nvidia-h100"], {"location": "DC1", "rack": "G1"}),
            "edge": ((2, 8), (8, 32), (128, 512), (100, 1000), [None],
                     {"location": "Edge-Site-A"})}[kind]
        lo, hi = pick([(5, 25), (25, 65), (65, 95)])
        total = float(rng.integers(*disk))
        nodes.append({
            "id": f"{kind}_node-{i:02d}", "name": f"{kind}_node-{i:02d}.cluster.local",
            "system": info["location"], "node_info": {**info, "gpu_model": pick(gpus)},
            "metrics": {"util": round(float(rng.uniform(lo, hi)), 2),
                        "mem_util": round(float(rng.uniform(lo, hi)), 2),
                        "network_bandwidth_mbps": float(rng.integers(*net)),
                        "cpu_cores": float(rng.integers(*cores)),
                        "mem_total": float(rng.integers(*mem)), "total_disk_gb": total,
                        "free_disk_gb": round(total * float(rng.uniform(0.1, 0.9)), 1),
                        "power_watts": (round(float(rng.uniform(50, 400)), 1)
                                        if rng.random() < 0.7 else None)}})
    tasks = []
    for _ in range(int(rng.integers(5, 21))):
        cpu, mem, gpus, _, limit = pick([
            ((8, 64), (4096, 32768), [None], None, (1800, 14400)),
            ((2, 16), (65536, 262144), [None], None, (3600, 28800)),
            ((4, 32), (16384, 131072), ["nvidia-a100", "nvidia-h100"], None, (1800, 10800)),
            ((1, 2), (1024, 4096), [None], None, (300, 1800)),
            ((2, 8), (8192, 65536), [None, "nvidia-t4"], None, (3600, 14400))])
        tasks.append({"id": str(uuid.UUID(int=int(rng.integers(1 << 62)))),
                      "requirements": {"required_cpu": int(rng.integers(*cpu)),
                                       "required_memory": int(rng.integers(*mem)),
                                       "required_gpu": pick(gpus)},
                      "submission_time": 1_700_000_000, "time_limit": int(rng.integers(*limit)),
                      "system": pick(["HPC", None])})
    pools = [{"id": f"pool-{p + 1}", "nodes": [], "vertexpool_labels": {}} for p in range(3)]
    for i, node in enumerate(nodes):
        pools[i % 3]["nodes"].append(node)
    return {"workloads": tasks, "tasks": tasks,
            "cluster": {"lastUpdated": 1_700_000_000.5, "vertexpools": pools, "links": []}}


def test_requests_built_as_decice_builds_them_are_all_answered(client):
    rng = np.random.default_rng(0)
    bodies = [decice_style_request(rng) for _ in range(50)]
    # What DECICE accepts and vte cannot use: an unknown GPU model, labels, a link to an
    # unknown pool, odd time limits, a negative bandwidth.
    bodies[0]["cluster"]["vertexpools"][0]["nodes"][0]["node_info"]["gpu_model"] = "nvidia-v100"
    bodies[1]["cluster"]["vertexpools"][1]["nodes"][0]["node_info"]["gpu_model"] = "nvidia-l4"
    bodies[2]["cluster"]["vertexpools"][0]["nodes"][0]["node_info"]["labels"] = ["rack-7", "ssd"]
    bodies[3]["cluster"]["links"] = [{"vertexpool_a_id": "pool-1", "vertexpool_b_id": "pool-9",
                                      "network_delay_ms": 4.0}]
    for body, limit in zip(bodies[4:7], (0, -5, 1.5)):
        body["tasks"][0]["time_limit"] = limit
    bodies[7]["cluster"]["vertexpools"][0]["nodes"][0]["metrics"]["network_bandwidth_mbps"] = -1
    t4_tasks = 0
    for body in bodies:
        r = _post(client, body)
        assert r.status_code == 201, r.text
        placements = r.json()["placements"]
        assert [p["task_id"] for p in placements] == [t["id"] for t in body["tasks"]]
        for task, p in zip(body["tasks"], placements):
            if task["requirements"]["required_gpu"] == "nvidia-t4":   # no node has one
                t4_tasks += 1
                assert p["target_node_ids"] == [] and "nvidia-t4" in p["reason"]
            assert bool(p["target_node_ids"]) != ("reason" in p)
    assert t4_tasks > 0


# --------------------------------------------------------------------------
# Reasons and the Content-Type rule
# --------------------------------------------------------------------------

def _defer(key, obs, params):           # a policy that never places
    return jnp.int32(obs.action_mask.shape[0] - 1)


def _first_node(key, obs, params):      # a policy that always takes node 0
    return jnp.int32(0)


@pytest.mark.parametrize("policy, body, words", [
    (OPTIMAL, _body([_task(0, 1)], []), "the cluster has no node"),
    (OPTIMAL, _body([_task(0, 60_000)], [_node("a", 8), _node("b", 16)]),
     "no node can host it on the reported metrics"),
    (OPTIMAL, _body([_task(0, 1, gpu="nvidia-a100")], [_node("a", 8)]),
     "is on no node vte can use"),
    (_defer, _body([_task(0, 1)], [_node("a", 8)]), "chose no node, although some node"),
    (_first_node, _body([_task(0, 6)], [_node("a", 4), _node("b", 8)]),
     "chose a node that cannot host it, although some other node could"),
], ids=["no-node", "no-fitting-node", "no-node-with-the-model", "deferred", "masked"])
def test_every_reason_says_what_happened(policy, body, words):
    placer = _OPTIMAL if policy == OPTIMAL else Placer(policy, PARAMS)
    with TestClient(create_app(placer, "p")) as c:
        r = c.post("/schedule", json=body)
    assert r.status_code == 201
    (answer,) = r.json()["placements"]
    assert answer["target_node_ids"] == [] and words in answer["reason"], answer["reason"]
    if "reported metrics" in words:
        assert "the most free on any node, each resource on its own: 16 cores" in answer["reason"]


@pytest.mark.parametrize("content_type, code", [
    ("application/json", 201), ("application/json; charset=utf-8", 201),
    ("application/vnd.decice+json", 201), (None, 201),
    ("text/plain", 415), ("application/x-www-form-urlencoded", 415), ("text/json", 415)])
def test_content_type_rule(content_type, code):
    body = json.dumps(_body([_task(0, 1)], [_node("a", 8)])).encode()
    headers = {} if content_type is None else {"content-type": content_type}
    with TestClient(create_app(_OPTIMAL, OPTIMAL)) as c:
        r = c.post("/schedule", content=body, headers=headers)
    assert r.status_code == code, r.text
    if code == 415:
        assert r.json()["detail"][0]["loc"] == ["header", "Content-Type"]
        assert repr(content_type) in r.json()["detail"][0]["msg"]


def test_the_example_of_serve_md_gets_its_answer():
    """SERVE.md's example request, posted, gets SERVE.md's example answer."""
    from pathlib import Path
    text = (Path(vte.__file__).parent / "cluster" / "decice" / "SERVE.md").read_text()
    example = text[text.index("## An example"):text.index("## The flow of one request")]
    request, answer = (json.loads(b) for b in re.findall(r"```json\n(.*?)```", example, re.S))
    with TestClient(create_app(_OPTIMAL, OPTIMAL)) as c:
        r = c.post("/schedule", json=request)
    assert r.status_code == 201
    got = r.json()
    assert got.pop("scheduling_duration_ms") >= 0
    answer.pop("scheduling_duration_ms")
    assert got == answer


def test_the_zoo_serves_by_name_and_an_openb_scheduler_is_refused():
    placer, name = make_placer("zoo:cluster-imitate")
    assert name == "cluster-imitate"
    with TestClient(create_app(placer, name)) as c:
        r = c.post("/schedule", json=_body([_task(0, 6)], [_node("a", 4), _node("b", 8)]))
    assert r.status_code == 201
    assert r.json()["placements"][0]["target_node_ids"] in (["b"], [])
    with pytest.raises(ValueError, match="OpenB-v0.*no mapping to DECICE"):
        make_placer("zoo:openb-evidence")
