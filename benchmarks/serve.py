"""Load test of `python -m vte.serve`: requests/s and latency over loopback HTTP.

    python benchmarks/serve.py [--policy kube_default] [--requests 10000] [--clients 64] \
        [--nodes 64] [--tasks 1] [--distinct 32] [--port 8031] [--json out.json]

Starts the server in a subprocess (warmed up for `--nodes`-node clusters and `--tasks`
tasks per request), waits for `GET /health`, then `--clients` concurrent clients send
`--requests` `POST /schedule` requests in total, cycling over `--distinct` different
vte scenarios exported as DECICE requests (`vte.serve.convert`). Prints requests/s,
p50 and p99 latency (ms, as the client measures it) and the number of errors (any answer
other than 201), then stops the server.
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


def make_bodies(nodes: int, tasks: int, distinct: int, seed: int = 0) -> list[bytes]:
    """`distinct` JSON bodies: vte scenarios of `nodes` nodes with `tasks` queued tasks."""
    import jax

    from vte.export import episode_states
    from vte.params import EnvParams
    from vte.serve import schemas as S
    from vte.serve.convert import cluster_state, tasks_from_requests

    params = EnvParams(num_nodes=nodes, queue_len=max(tasks, 1), initial_queue_fill=1.0)
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


async def drive(url: str, key: str, bodies: list[bytes], requests: int, clients: int):
    import httpx2 as httpx   # the HTTP client Starlette now recommends (httpx is deprecated there)

    latencies, errors = [], 0
    counter = iter(range(requests))
    headers = {"X-Internal-Api-Key": key, "content-type": "application/json"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http):
        nonlocal errors
        for i in counter:
            t0 = time.perf_counter()
            try:
                r = await http.post(url, content=bodies[i % len(bodies)], headers=headers)
                ok = r.status_code == 201
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - t0)
            errors += not ok

    async with httpx.AsyncClient(timeout=120.0, limits=limits) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        elapsed = time.perf_counter() - start
    return np.asarray(latencies), errors, elapsed


def wait_healthy(base: str, proc: subprocess.Popen, timeout: float = 600.0) -> None:
    import httpx2 as httpx   # the HTTP client Starlette now recommends (httpx is deprecated there)

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode}")
        try:
            if httpx.get(base + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server was not healthy within {timeout} s")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="kube_default")
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--tasks", type=int, default=1)
    parser.add_argument("--distinct", type=int, default=32)
    parser.add_argument("--port", type=int, default=8031)
    parser.add_argument("--window-ms", type=float, default=2.0)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    for name in ("requests", "clients", "nodes", "tasks", "distinct"):
        if getattr(args, name) < 1:
            sys.exit(f"error: --{name} {getattr(args, name)} is invalid: allowed >= 1")

    bodies = make_bodies(args.nodes, args.tasks, args.distinct)
    key = secrets.token_hex(16)
    env = dict(os.environ, VTE_BENCH_API_KEY=key)
    cmd = [sys.executable, "-m", "vte.serve", "--policy", args.policy, "--host", "127.0.0.1",
           "--port", str(args.port), "--api-key-env", "VTE_BENCH_API_KEY",
           "--warmup-nodes", str(args.nodes), "--warmup-tasks", str(args.tasks),
           "--window-ms", str(args.window_ms)]
    base = f"http://127.0.0.1:{args.port}"
    proc = subprocess.Popen(cmd, env=env)
    try:
        t0 = time.perf_counter()
        wait_healthy(base, proc)
        startup = time.perf_counter() - t0
        # One untimed round so every connection is open before the clock starts.
        asyncio.run(drive(base + "/schedule", key, bodies, args.clients, args.clients))
        lat, errors, elapsed = asyncio.run(
            drive(base + "/schedule", key, bodies, args.requests, args.clients))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result = {
        "policy": args.policy, "requests": args.requests, "clients": args.clients,
        "nodes": args.nodes, "tasks": args.tasks, "startup_s": round(startup, 1),
        "requests_per_s": round(args.requests / elapsed, 1),
        "p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 1),
        "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 1),
        "errors": int(errors),
    }
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
