"""Serve a vte policy over DECICE's scheduler API.

    python -m vte.serve --policy runs/ppo [--host 127.0.0.1] [--port 8030] \
        [--api-key-env VTE_API_KEY] [--weights 1 1 1] [--window-ms 2] [--max-batch 64] \
        [--warmup-nodes 64] [--warmup-tasks 1] [--seed 0]

`--policy` is a training run directory (`train/ppo.py --out`), a heuristic of
`vte.heuristics.ALL` (such as kube_default) or `optimal` (vte's least-cost node on the
reported cluster). With `--api-key-env VAR` the environment variable VAR holds the key
that `/schedule` requests must send as `X-Internal-Api-Key` (403 otherwise).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{flag} {text!r} is invalid: allowed comma-separated integers "
                         "(empty: none)") from None
    if any(v < 1 for v in values):
        raise ValueError(f"{flag} {text!r} is invalid: allowed integers >= 1")
    return values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vte.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True,
                        help="training run directory, heuristic name or 'optimal'")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8030)
    parser.add_argument("--api-key-env", default=None, metavar="VAR",
                        help="environment variable holding the X-Internal-Api-Key value")
    parser.add_argument("--weights", type=float, nargs=3, default=None,
                        metavar=("PERF", "ENERGY", "REL"),
                        help="objective weights (default: the run's, else 1 1 1)")
    parser.add_argument("--window-ms", type=float, default=2.0,
                        help="micro-batching window, ms (default 2)")
    parser.add_argument("--max-batch", type=int, default=64, help="1..64 (default 64)")
    parser.add_argument("--warmup-nodes", default="64",
                        help="node counts compiled at start-up, comma-separated (default 64)")
    parser.add_argument("--warmup-tasks", default="1",
                        help="tasks per request compiled at start-up (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="key of randomised policies")
    parser.add_argument("--log-level", default="warning",
                        choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)

    try:
        import uvicorn

        from vte.serve.app import create_app
    except ImportError as err:
        sys.exit(f"python -m vte.serve needs the serve extra (pip install 'vte[serve]'): {err}")
    from vte.serve.place import make_placer

    try:
        if not 0 < args.port < 65536:
            raise ValueError(f"--port {args.port} is invalid: allowed 1..65535")
        api_key = None
        if args.api_key_env is not None:
            api_key = os.environ.get(args.api_key_env)
            if not api_key:
                raise ValueError(f"--api-key-env {args.api_key_env!r}: that environment "
                                 "variable is not set or empty; set it to the key")
        placer, name = make_placer(args.policy, args.weights, args.seed)
        app = create_app(placer, name, api_key=api_key, window_ms=args.window_ms,
                         max_batch=args.max_batch,
                         warmup_nodes=_ints(args.warmup_nodes, "--warmup-nodes"),
                         warmup_tasks=_ints(args.warmup_tasks, "--warmup-tasks"))
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    logging.basicConfig(level=args.log_level.upper())
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
