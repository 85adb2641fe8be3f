"""`python -m vte.serve` (`--protocol decice`, the default): a Cluster-v0 policy over DECICE's
scheduler API (`--protocol kube-extender` is OpenB-v0's: `vte.openb.kube.cli`).

    python -m vte.serve --policy runs/ppo [--host 127.0.0.1] [--port 8030]
        [--api-key-env VTE_API_KEY] [--weights 1 1 1] [--max-batch 64] [--window-ms 0]
        [--warmup-nodes 16,64] [--warmup-tasks 1,8,64] [--warmup-batches 1,8,64]
        [--max-body-bytes 16777216] [--body-timeout-s 30] [--header-timeout-s 10]
        [--idle-timeout-s 5] [--max-connections 1024] [--seed 0]

`--policy` is a training run directory (`train/ppo.py --out`), a heuristic of
`vte.cluster.heuristics.ALL` (such as kube_default) or `optimal` (vte's least-cost node on the
reported cluster). With `--api-key-env VAR` the environment variable VAR holds the key
that `/schedule` requests must send as `X-Internal-Api-Key` (403 otherwise); without it
anyone may call `/schedule` (a WARNING says so at start-up).

The port is bound first (a taken port fails at once), then the server answers while the
warm-up shapes compile in the background: every (batch, nodes, tasks) bucket of the
`--warmup-*` lists, on 4 vertex pools; the defaults cover DECICE's own scenario sizes
(10-50 nodes in 3 pools, 5-20 tasks) and single-task requests. `GET /health` answers 503
until they are compiled; then the largest buckets compile (`--no-warmup-largest`: not),
after which every request within the schema's bounds (4096 nodes, 64 vertex pools, 512
tasks) runs at once in a compiled shape that holds it. A request's exact shape compiles
off the request path, for next time. Shapes
compile in a child process (`--compile-in-process`: on a thread of the server), so that
tracing a new program never holds the server's GIL.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys


def _ints(text: str, flag: str, allowed: tuple[int, ...] | None = None) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{flag} {text!r} is invalid: allowed comma-separated integers "
                         "(empty: none)") from None
    if any(v < 1 for v in values):
        raise ValueError(f"{flag} {text!r} is invalid: allowed integers >= 1")
    if allowed is not None and any(v > allowed[-1] for v in values):
        raise ValueError(f"{flag} {text!r} is invalid: allowed integers <= {allowed[-1]}")
    return values


def warmup_shapes(nodes, tasks, batches, sites=(4,)) -> list[tuple[int, int, int, int]]:
    """The (batch, N, S, T) buckets of the given sizes, the cheap ones first."""
    from vte.cluster.decice.convert import NODE_BUCKETS, SITE_BUCKETS, TASK_BUCKETS, bucket
    from vte.cluster.decice.place import BATCH_BUCKETS
    shapes = {(bucket(b, BATCH_BUCKETS, "--warmup-batches"),
               bucket(n, NODE_BUCKETS, "--warmup-nodes"), bucket(s, SITE_BUCKETS, "sites"),
               bucket(t, TASK_BUCKETS, "--warmup-tasks"))
              for b in batches for n in nodes for s in sites for t in tasks}
    return sorted(shapes, key=lambda k: (k[1] * k[3] * k[0], k))


def largest_shapes() -> list[tuple[int, int, int, int]]:
    """The single-request shapes compiled after the start-up ones, smallest first; the
    last holds every request the schema allows (the largest node, site and task buckets),
    so once it is compiled no request waits for a compile."""
    from vte.cluster.decice.convert import NODE_BUCKETS, SITE_BUCKETS, TASK_BUCKETS
    return [(1, NODE_BUCKETS[-3], SITE_BUCKETS[-2], TASK_BUCKETS[-2]),
            (1, NODE_BUCKETS[-2], SITE_BUCKETS[-1], TASK_BUCKETS[-1]),
            (1, NODE_BUCKETS[-1], SITE_BUCKETS[-1], TASK_BUCKETS[-1])]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        from vte.serve import server as srv
        from vte.serve.http import BODY_TIMEOUT_S, MAX_BODY_BYTES
        from vte.cluster.decice.app import create_app
    except ImportError as err:
        sys.exit(f"python -m vte.serve needs the serve extra (pip install 'vte[serve]'): {err}")

    parser = argparse.ArgumentParser(prog="python -m vte.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocol", default="decice",
                        help="decice: DECICE's POST /schedule (default); kube-extender: a "
                             "kube-scheduler extender with an OpenB policy (its own flags: "
                             "--protocol kube-extender --help)")
    parser.add_argument("--policy", required=True,
                        help="training run directory, heuristic name or 'optimal'")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8030)
    parser.add_argument("--api-key-env", default=None, metavar="VAR",
                        help="environment variable holding the X-Internal-Api-Key value")
    parser.add_argument("--weights", type=float, nargs=3, default=None,
                        metavar=("PERF", "ENERGY", "REL"),
                        help="objective weights (default: the run's, else 1 1 1)")
    parser.add_argument("--window-ms", type=float, default=0.0,
                        help="extra wait for a batch to fill, ms (default 0: a batch is "
                             "what arrived while the previous one ran)")
    parser.add_argument("--max-batch", type=int, default=64, help="1..64 (default 64)")
    parser.add_argument("--warmup-nodes", default="16,64",
                        help="node counts compiled at start-up (default 16,64)")
    parser.add_argument("--warmup-tasks", default="1,8,64",
                        help="tasks per request compiled at start-up (default 1,8,64)")
    parser.add_argument("--warmup-batches", default="1,8,64",
                        help="batch sizes compiled at start-up (default 1,8,64; a batch "
                             "runs in the least compiled size that holds it)")
    parser.add_argument("--warmup-largest", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="after the start-up shapes, compile the largest buckets (256, "
                             "1024 and 4096 nodes, one request), so that no request within "
                             "the schema's bounds waits for a compile (default on)")
    parser.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES,
                        help=f"largest request body, bytes (default {MAX_BODY_BYTES}; 413)")
    parser.add_argument("--body-timeout-s", type=float, default=BODY_TIMEOUT_S,
                        help=f"time for a body to arrive, s (default {BODY_TIMEOUT_S:g}; 408)")
    parser.add_argument("--header-timeout-s", type=float, default=srv.HEADER_TIMEOUT_S,
                        help="time for a request head to arrive before the connection is "
                             f"closed, s (default {srv.HEADER_TIMEOUT_S:g})")
    parser.add_argument("--idle-timeout-s", type=float, default=srv.IDLE_TIMEOUT_S,
                        help="idle time after an answer before the connection is closed, s "
                             f"(default {srv.IDLE_TIMEOUT_S:g})")
    parser.add_argument("--max-connections", type=int, default=srv.MAX_CONNECTIONS,
                        help=f"open connections at most (default {srv.MAX_CONNECTIONS})")
    parser.add_argument("--compile-in-process", action="store_true",
                        help="compile new shapes on a thread of the server process (default: "
                             "in a child process, which never holds the server's GIL)")
    parser.add_argument("--seed", type=int, default=0, help="key of randomised policies")
    parser.add_argument("--log-level", default="warning",
                        choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)

    from vte.cluster.decice.convert import NODE_BUCKETS, TASK_BUCKETS
    from vte.cluster.decice.place import BATCH_BUCKETS, CompilerProcess, make_placer

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(levelname)s: %(name)s: %(message)s")
    log = logging.getLogger("vte.serve")
    def checks():
        api_key = None
        if args.api_key_env is not None:
            api_key = os.environ.get(args.api_key_env)
            if not api_key:
                raise ValueError(f"--api-key-env {args.api_key_env!r}: that environment "
                                 "variable is not set or empty; set it to the key")
        warmup = warmup_shapes(_ints(args.warmup_nodes, "--warmup-nodes", NODE_BUCKETS),
                               _ints(args.warmup_tasks, "--warmup-tasks", TASK_BUCKETS),
                               _ints(args.warmup_batches, "--warmup-batches", BATCH_BUCKETS))
        srv.protocol(args.header_timeout_s, args.max_connections)     # checks the limits
        if not args.idle_timeout_s > 0:
            raise ValueError(f"--idle-timeout-s {args.idle_timeout_s} is invalid: allowed a "
                             "number > 0")
        return api_key, warmup

    (api_key, warmup), sock = srv.checked_bind(args.host, args.port, checks)
    try:
        placer, name = make_placer(args.policy, args.weights, args.seed)
        compiler = (None if args.compile_in_process else
                    CompilerProcess(args.policy, args.weights, args.seed))
        app = create_app(placer, name, api_key=api_key, window_ms=args.window_ms,
                         max_batch=args.max_batch, warmup=warmup,
                         warmup_later=largest_shapes() if args.warmup_largest else (),
                         max_body_bytes=args.max_body_bytes,
                         body_timeout_s=args.body_timeout_s, compiler=compiler)
    except (ValueError, FileNotFoundError) as err:
        sock.close()
        if "compiler" in locals() and compiler is not None:
            compiler.close()
        sys.exit(f"error: {err}")
    if api_key is None:
        log.warning("no API key configured (--api-key-env): /schedule answers anyone")
    print(f"serving {name!r} on http://{args.host}:{sock.getsockname()[1]}; compiling "
          f"{len(warmup)} warm-up shapes (GET /health: 503 until warm)", file=sys.stderr)
    srv.run(app, sock, header_timeout_s=args.header_timeout_s,
            idle_timeout_s=args.idle_timeout_s, max_connections=args.max_connections,
            log_level=args.log_level)


if __name__ == "__main__":
    main()
