"""Latency of the kube-scheduler extender on the whole OpenB cluster, over HTTP.

    python -m benchmarks.kube_extender [--policy fgd] [--pods 300] [--nodes gpu]
        [--node-bytes 2000] [--json out.json]

Starts `python -m vte.serve --protocol kube-extender`'s app under uvicorn on a free local
port (one process: client and server share the CPU), waits for `GET /health` (the scoring
compiled), then schedules `--pods` pods of the `default` trace (a seed-42 workload) as
kube-scheduler does with `nodeCacheCapable: false`: `POST /filter` with every node sent in
full (v1.Node objects padded with the conditions, addresses, node info and images a real
node reports, about `--node-bytes` of JSON each), `POST /prioritize` with the nodes that
passed, `POST /bind` to the best. Prints p50 / p99 / max in ms of filter, prioritize and
their sum per pod (the time kube-scheduler waits on the extender before binding), over a
keep-alive connection. Times run from sending a body (compact JSON, as kube-scheduler's Go
encoder writes it) to the answer's last byte; decoding the answer is the client's own cost.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import sys
import threading
import time

import numpy as np


def realistic(node: dict, size: int) -> dict:
    """A node object padded as kubectl shows real ones: conditions, addresses, node info,
    images (to about `size` bytes of JSON)."""
    name = node["metadata"]["name"]
    node = json.loads(json.dumps(node))
    node["metadata"].update(uid=f"00000000-0000-0000-0000-{abs(hash(name)) % 10**12:012d}",
                            resourceVersion="123456", creationTimestamp="2024-01-01T00:00:00Z")
    node["metadata"]["labels"].update({"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                       "node.kubernetes.io/instance-type": "ecs.gn6v"})
    node["spec"] = {"podCIDR": "10.244.0.0/24", "providerID": f"alicloud://{name}"}
    status = node["status"]
    status["conditions"] = [{"type": t, "status": "False" if t != "Ready" else "True",
                             "lastHeartbeatTime": "2024-01-01T00:00:00Z",
                             "lastTransitionTime": "2024-01-01T00:00:00Z",
                             "reason": f"Kubelet{t}", "message": f"kubelet reports {t}"}
                            for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
    status["addresses"] = [{"type": "InternalIP", "address": "10.0.0.1"},
                           {"type": "Hostname", "address": name}]
    status["nodeInfo"] = {"machineID": "0" * 32, "systemUUID": "0" * 36, "bootID": "0" * 36,
                          "kernelVersion": "5.10.0", "osImage": "Alibaba Cloud Linux 3",
                          "containerRuntimeVersion": "containerd://1.6.20",
                          "kubeletVersion": "v1.28.3", "kubeProxyVersion": "v1.28.3",
                          "operatingSystem": "linux", "architecture": "amd64"}
    images, k = [], 0
    while len(json.dumps(node)) + len(json.dumps(images)) < size:
        images.append({"names": [f"registry.example/team/image-{k}@sha256:{'0' * 64}"],
                       "sizeBytes": 1_000_000_000 + k})
        k += 1
    status["images"] = images
    return node


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--nodes", default="gpu", help="'gpu' (1213 nodes), 'all' or a path")
    parser.add_argument("--subset", type=int, default=0, help="the first N nodes only (0: all)")
    parser.add_argument("--node-bytes", type=int, default=2000,
                        help="JSON bytes of each node object sent (default 2000)")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(argv)

    import jax
    import uvicorn

    from vte.openb import workload
    from vte.openb.__main__ import make_policy
    from vte.openb.kube import objects
    from vte.openb.kube.extender import Extender, create_app
    from vte.openb.kube.twin import Twin
    from vte.openb.trace import load_nodes, load_pods

    nodes = load_nodes(args.nodes)
    if args.subset:
        nodes = nodes.take(range(args.subset))
    trace = load_pods("default", nodes)
    twin = Twin(make_policy(args.policy, nodes.models), workload.typical_pods(trace), nodes.models)
    node_objs = [realistic(n, args.node_bytes) for n in objects.node_objects(nodes)]
    for n in node_objs:
        twin.add_node(objects.node_row(n))
    app = create_app(Extender(twin), args.policy, url_prefix="/vte")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    conn = None
    start = time.perf_counter()
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("GET", "/health")
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    warm_s = time.perf_counter() - start

    def post(verb: str, body: dict) -> tuple[object, float]:
        """The answer and the ms from sending the body (compact JSON, as Go's encoder
        writes it) to the answer's last byte (decoding it is the caller's own cost)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        t0 = time.perf_counter()
        conn.request("POST", f"/vte/{verb}", data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        elapsed = 1e3 * (time.perf_counter() - t0)
        return json.loads(raw), elapsed

    order = workload.build_workload(trace, nodes, seed=42).order[:args.pods]
    pod_objs = objects.pod_objects(trace)
    filt, prio, both, request_bytes = [], [], [], 0
    for t, r in enumerate(order):
        pod = json.loads(json.dumps(pod_objs[r]))
        pod["metadata"].update(name=f"p{t}", uid=f"uid-{t}")
        args_body = {"Pod": pod, "Nodes": {"items": node_objs}, "NodeNames": None}
        request_bytes = max(request_bytes, len(json.dumps(args_body, separators=(",", ":"))))
        f, f_ms = post("filter", args_body)
        passing = f["Nodes"]["items"]
        if not passing:
            continue
        hosts, p_ms = post("prioritize", {"Pod": pod, "Nodes": {"items": passing},
                                          "NodeNames": None})
        best = max(hosts, key=lambda h: h["Score"])["Host"]
        b, _ = post("bind", {"PodName": f"p{t}", "PodNamespace": "default",
                             "PodUID": f"uid-{t}", "Node": best})
        assert b["Error"] == "", b
        filt.append(f_ms)
        prio.append(p_ms)
        both.append(f_ms + p_ms)
    server.should_exit = True

    def stats(x):
        return {"p50_ms": round(float(np.percentile(x, 50)), 2),
                "p99_ms": round(float(np.percentile(x, 99)), 2),
                "max_ms": round(float(np.max(x)), 2)}

    result = {"policy": args.policy, "nodes": len(nodes), "pods_scheduled": len(both),
              "request_bytes": request_bytes, "warmup_s": round(warm_s, 2),
              "filter": stats(filt), "prioritize": stats(prio), "filter_plus_prioritize": stats(both),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "jax": jax.__version__, "device": str(jax.devices()[0].platform)}}
    print(f"{args.policy} on {len(nodes)} nodes sent in full ({request_bytes / 1e6:.1f} MB a "
          f"filter request), {len(both)} pods; warm-up {warm_s:.1f} s")
    for key in ("filter", "prioritize", "filter_plus_prioritize"):
        s = result[key]
        print(f"  {key:24s} p50 {s['p50_ms']:7.2f} ms   p99 {s['p99_ms']:7.2f} ms   "
              f"max {s['max_ms']:7.2f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
