"""Load test of `python -m vte.serve`: requests/s and latency over loopback HTTP.

    python benchmarks/serve.py [--policy kube_default] [--clients 1,64] [--seconds 10]
        [--nodes 64] [--tasks 1] [--distinct 32] [--cold-nodes 300] [--port 8031]
        [--json out.json]

Starts the server in a subprocess (warmed up for `--nodes`-node clusters and `--tasks`
tasks per request, every batch bucket), waits for `GET /health`, then, for each count in
`--clients`, that many concurrent clients send `POST /schedule` requests for `--seconds`,
cycling over `--distinct` different vte scenarios exported as DECICE requests
(`vte.cluster.decice.convert`). Prints, per client count, requests/s, p50 and p99 latency (ms, as
the client measures it) and the number of errors (any answer other than 201), and the
ratio of each count's requests/s to one client's.

Then the cold-compile check (`--cold-nodes`, 0 to skip): while the largest client count
sends warmed requests, one request of a shape never compiled (`--cold-nodes` nodes) is
sent; the p99 of the warmed requests answered while it compiles is printed beside that
count's usual p99.

The clients are a minimal HTTP/1.1 keep-alive client on asyncio streams, in one process,
so that they cost the shared CPU as little as possible; the figures are the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
import uuid

import numpy as np


def make_bodies(nodes: int, tasks: int, distinct: int, seed: int = 0,
                sites: int | None = None) -> list[bytes]:
    """`distinct` JSON bodies: vte scenarios of `nodes` nodes with `tasks` queued tasks (on
    `sites` vertex pools; None: the default of `EnvParams`)."""
    import jax

    from vte.cluster.export import episode_states
    from vte.cluster.params import EnvParams
    from vte.cluster.decice import schemas as S
    from vte.cluster.decice.convert import cluster_state, tasks_from_requests

    params = EnvParams(num_nodes=nodes, queue_len=max(tasks, 1), initial_queue_fill=1.0,
                       **({} if sites is None else {"num_sites": sites}))
    states = jax.device_get(episode_states(params, seed, distinct, warmup_steps=8))
    bodies = []
    for e in range(distinct):
        state = jax.tree_util.tree_map(lambda x: x[e], states)
        ids = [uuid.UUID(int=e * 1000 + k) for k in range(params.queue_len)]
        state = state.replace(queue=state.queue.replace(valid=np.arange(params.queue_len) < tasks))
        request = S.ScheduleRequest(tasks=tasks_from_requests(state.queue, ids),
                                    cluster=cluster_state(state))
        bodies.append(request.model_dump_json().encode())
    return bodies


class Client:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the status."""

    def __init__(self, host: str, port: int, key: str):
        self.host, self.port, self.key = host, port, key
        self.reader = self.writer = None

    async def post(self, path: str, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nX-Internal-Api-Key: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (path.encode(), self.host.encode(), self.key.encode(), len(body)) + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await self.reader.readexactly(length)
        return status

    def close(self):
        if self.writer is not None:
            self.writer.close()


async def drive(host: str, port: int, key: str, bodies: list[bytes], clients: int,
                seconds: float, extra=None):
    """`clients` concurrent clients for `seconds`; returns (send times, latencies s,
    errors, elapsed s, extra's result). `extra` is an optional coroutine function run
    beside them once they are going (the cold request)."""
    sent, latencies, errors = [], [], 0
    conns = [Client(host, port, key) for _ in range(clients)]
    for c in conns:                     # connections open before the clock starts
        await c.post("/schedule", bodies[0])
    stop = time.perf_counter() + seconds

    async def client(c: Client, first: int):
        nonlocal errors
        i = first
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            ok = await c.post("/schedule", bodies[i % len(bodies)]) == 201
            sent.append(t0)
            latencies.append(time.perf_counter() - t0)
            errors += not ok
            i += clients

    start = time.perf_counter()
    tasks = [asyncio.ensure_future(client(c, k)) for k, c in enumerate(conns)]
    extra_result = None
    if extra is not None:
        await asyncio.sleep(min(1.0, seconds / 4))
        extra_result = await extra()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return np.asarray(sent), np.asarray(latencies), errors, elapsed, extra_result


def wait_healthy(base: str, proc: subprocess.Popen, timeout: float = 600.0) -> None:
    import urllib.request

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode}")
        try:
            if urllib.request.urlopen(base + "/health", timeout=2.0).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server was not healthy within {timeout} s")


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        sys.exit(f"error: {flag} {text!r} is invalid: allowed comma-separated integers >= 1")
    return values


def _figures(lat: np.ndarray, errors: int, elapsed: float) -> dict:
    return {"requests": int(lat.size), "requests_per_s": round(lat.size / elapsed, 1),
            "p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 2),
            "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 2), "errors": int(errors)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="kube_default")
    parser.add_argument("--clients", default="1,64", help="client counts (default 1,64)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per client count")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--tasks", type=int, default=1)
    parser.add_argument("--distinct", type=int, default=32)
    parser.add_argument("--cold-nodes", type=int, default=300,
                        help="nodes of the never-compiled request (0: skip the check)")
    parser.add_argument("--port", type=int, default=8031)
    parser.add_argument("--window-ms", type=float, default=0.0)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    clients = _ints(args.clients, "--clients")
    for name in ("nodes", "tasks", "distinct"):
        if getattr(args, name) < 1:
            sys.exit(f"error: --{name} {getattr(args, name)} is invalid: allowed >= 1")
    if not args.seconds > 0 or args.cold_nodes < 0:
        sys.exit("error: --seconds must be > 0 and --cold-nodes >= 0")

    bodies = make_bodies(args.nodes, args.tasks, args.distinct)
    cold_body = make_bodies(args.cold_nodes, args.tasks, 1, seed=1)[0] if args.cold_nodes else None
    key = secrets.token_hex(16)
    env = dict(os.environ, VTE_BENCH_API_KEY=key)
    cmd = [sys.executable, "-m", "vte.serve", "--policy", args.policy, "--host", "127.0.0.1",
           "--port", str(args.port), "--api-key-env", "VTE_BENCH_API_KEY",
           "--warmup-nodes", str(args.nodes), "--warmup-tasks", str(args.tasks),
           "--warmup-batches", "1,2,4,8,16,32,64", "--window-ms", str(args.window_ms)]
    base = f"http://127.0.0.1:{args.port}"
    proc = subprocess.Popen(cmd, env=env)
    runs, cold = {}, None
    try:
        t0 = time.perf_counter()
        wait_healthy(base, proc)
        startup = time.perf_counter() - t0
        for n in clients:
            _, lat, errors, elapsed, _ = asyncio.run(
                drive("127.0.0.1", args.port, key, bodies, n, args.seconds))
            runs[n] = _figures(lat, errors, elapsed)
            print(json.dumps({"clients": n, **runs[n]}), flush=True)
        if cold_body is not None:
            n = clients[-1]

            async def cold_request():
                c = Client("127.0.0.1", args.port, key)
                t = time.perf_counter()
                status = await c.post("/schedule", cold_body)
                c.close()
                return t, time.perf_counter(), status

            sent, lat, errors, elapsed, (c0, c1, status) = asyncio.run(
                drive("127.0.0.1", args.port, key, bodies, n, max(args.seconds, 30.0),
                      cold_request))
            during = lat[(sent >= c0) & (sent + lat <= c1)]
            cold = {"clients": n, "cold_nodes": args.cold_nodes, "cold_status": status,
                    "cold_ms": round((c1 - c0) * 1e3, 1),
                    "warm_requests_during": int(during.size),
                    "warm_p99_during_ms": round(float(np.percentile(during, 99)) * 1e3, 2)
                    if during.size else None,
                    "warm_p99_usual_ms": runs[n]["p99_ms"], "errors": int(errors)}
            print(json.dumps(cold), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    one = runs.get(1, {}).get("requests_per_s")
    result = {"policy": args.policy, "nodes": args.nodes, "tasks": args.tasks,
              "startup_s": round(startup, 1), "seconds": args.seconds,
              "runs": {str(n): {**r, "vs_one_client": round(r["requests_per_s"] / one, 2)
                                if one else None} for n, r in runs.items()},
              "cold_compile": cold}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
