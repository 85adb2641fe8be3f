"""End to end over HTTP: a driver that does what kube-scheduler's extender client does
replays a few hundred pods of `default` on a sub-cluster against the running extender,
and every pod lands on the node and GPUs of the in-process replay of the same policy.
Also `python -m vte.openb --cluster SNAPSHOT`."""

from __future__ import annotations

import json
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from vte.openb import cluster, workload  # noqa: E402
from vte.openb.__main__ import main as openb_main, make_policy  # noqa: E402
from vte.openb.kube import objects  # noqa: E402
from vte.openb.kube.extender import Extender, create_app  # noqa: E402
from vte.openb.kube.twin import MAX_SCORE, Twin  # noqa: E402
from vte.openb.trace import load_nodes, load_pods  # noqa: E402

NODES, PODS, WEIGHT = 24, 250, 1000      # the sub-cluster saturates: pods fail too


def in_process(policy, sub, trace, typical, w, order):
    """The replay, pod by pod (`simulator.pod_step`'s steps), recording where each goes."""
    spec = cluster.make_spec(sub, typical)

    @jax.jit
    def step(state, pod, key):
        feas = cluster.feasible(state, pod, spec)
        scores, shared = policy(key, state, pod, feas, spec)
        node = cluster.select(scores, feas, state.rank)
        placed = jnp.any(feas)
        taken = cluster.taken_gpus(state.gpu_free[:, node], pod, shared[node]) & (pod.num_gpus > 0)
        new = cluster.submit(cluster.place(state, spec, pod, node, shared[node], placed), pod)
        return new, node, placed, taken

    state, out = cluster.empty_state(spec, jnp.asarray(w.rank)), {}
    for t, r in enumerate(order):
        pod = cluster.Pod(*(jnp.int32(getattr(trace, f)[r]) for f in (
            "cpu_milli", "memory_mib", "num_gpus", "gpu_milli", "model_mask")), valid=jnp.bool_(True))
        state, node, placed, taken = step(state, pod, jax.random.PRNGKey(t))
        if bool(placed):
            out[f"uid-{t}"] = (sub.names[int(node)], tuple(np.flatnonzero(np.asarray(taken)).tolist()))
    return out, int(cluster.used_milli(state, spec))


def drive(client, node_objs, pod_objs, order, seed=0):
    """kube-scheduler's side: filter with Nodes in full, prioritize the passing nodes, pick
    the highest Score x weight x (100 / 10) (ties: uniformly at random, as selectHost's
    reservoir sampling), bind. Returns the pods no node passed."""
    tie, failed = random.Random(seed), 0
    for t, r in enumerate(order):
        pod = json.loads(json.dumps(pod_objs[r]))
        pod["metadata"].update(name=f"p{t}", uid=f"uid-{t}")
        f = client.post("/vte/filter", json={"Pod": pod, "Nodes": {"items": node_objs},
                                             "NodeNames": None}).json()
        assert f["Error"] == "", f
        passing = f["Nodes"]["items"]
        assert len(passing) + len(f["FailedNodes"]) + len(f["FailedAndUnresolvableNodes"]) == len(node_objs)
        if not passing:
            failed += 1
            continue
        hosts = client.post("/vte/prioritize", json={"Pod": pod, "Nodes": {"items": passing},
                                                     "NodeNames": None}).json()
        total = {h["Host"]: h["Score"] * WEIGHT * (100 // MAX_SCORE) for h in hosts}
        best = max(total.values())
        host = tie.choice(sorted(h for h, s in total.items() if s == best))
        b = client.post("/vte/bind", json={"PodName": f"p{t}", "PodNamespace": "default",
                                           "PodUID": f"uid-{t}", "Node": host}).json()
        assert b == {"Error": ""}
    return failed


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fgd", "zoo:openb-evidence"])
def test_http_replay_equals_the_in_process_replay(name):
    full = load_nodes("gpu")
    trace = load_pods("default", full)
    sub = full.take(np.sort(np.random.default_rng(1).choice(len(full), NODES, replace=False)))
    typical = workload.typical_pods(trace)
    w = workload.build_workload(trace, sub, seed=42, tune=1.3)
    order = w.order[:PODS]                       # the workload of 24 nodes has 236 pods
    policy = make_policy(name, full.models)
    reference, used = in_process(policy, sub, trace, typical, w, order)

    twin = Twin(policy, typical, full.models)
    twin.set_ranks(dict(zip(sub.names, w.rank.tolist())))      # the replay's tie-break
    with TestClient(create_app(Extender(twin), name, url_prefix="/vte")) as client:
        failed = drive(client, objects.node_objects(sub), objects.pod_objects(trace), order)
    got = twin.allocation()
    assert len(order) >= 200 and failed == len(order) - len(reference) and failed > 0
    assert got == reference                      # same node and GPUs for every pod
    assert twin.used_milli() == used


@pytest.mark.slow
def test_openb_replays_a_cluster_snapshot(tmp_path):
    full = load_nodes("gpu")
    trace = load_pods("default", full)
    items = objects.node_objects(full.take(range(0, 1213, 60))) + objects.pod_objects(trace)[:200]
    (tmp_path / "snap.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                                     "items": items}))
    result = openb_main(["--cluster", str(tmp_path / "snap.json"), "--policies", "fgd,best_fit",
                         "--seeds", "1", "--tune", "1.0", "--no-progress", "--cache", "none"])
    assert set(result["policies"]) == {"fgd", "best_fit"}


@pytest.mark.slow
def test_latency_benchmark_runs_on_a_small_cluster(tmp_path):
    from benchmarks import kube_extender
    out = kube_extender.main(["--subset", "16", "--pods", "5", "--node-bytes", "500",
                              "--json", str(tmp_path / "k.json")])
    assert out["nodes"] == 16 and out["pods_scheduled"] >= 1
    assert 0 < out["filter"]["p50_ms"] <= out["filter"]["max_ms"]
    assert json.loads((tmp_path / "k.json").read_text())["policy"] == "fgd"
