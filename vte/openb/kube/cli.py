"""`python -m vte.serve --protocol kube-extender`: the kube-scheduler extender's command line.

    python -m vte.serve --protocol kube-extender --policy fgd --snapshot cluster.json \
        [--url-prefix /vte] [--host 0.0.0.0] [--port 8888] [--watch] [--kubeconfig FILE |
        --in-cluster] [--tls-cert FILE --tls-key FILE] [--typical default|snapshot|PATH]
        [--convention FILE] [--gpu-milli-key K] [--gpu-count-key K] [--gpu-model-key K]
        [--gpu-index-key K] [--warmup-nodes 1213,2048] [--max-body-bytes N] [--seed 0]
        [--compilation-cache DIR|off]

--policy: any name of `python -m vte.openb --policies` (random, dot_product,
gpu_clustering, gpu_packing, best_fit, fgd, pwr, pwr_fgd:<a>, pwr_within:..., a trained run
directory, zoo:openb-evidence, zoo:openb-agnostic for GPU models other than OpenB's,
plan:...). --snapshot: what `kubectl get nodes,pods -A -o
json` prints (nodes and the pods bound on them at start). --watch: list and watch pods
(and list nodes) with the kube client, so pods bound or deleted by others are counted.
With a kube client (--kubeconfig, --in-cluster, or --watch with the default kubeconfig)
/bind patches the pod's GPU-index annotation and creates its binding; without one it
records the bind only (a dry run: do not give kube-scheduler a bindVerb then).
--typical: the trace whose typical pods FGD's fragmentation weighs (default: the bundled
`default`; `snapshot`: the snapshot's pods). GPU models: the bundled OpenB models, the
snapshot's and --models make the vocabulary (a node of another model is kept without its
GPUs); a model-agnostic network reads each model's row of the per-model table, extended by
the JSON file the environment variable VTE_OPENB_GPU_MODELS names. docs/kubernetes.md is
the operator's guide.
"""

from __future__ import annotations

import argparse
import logging
import sys

from vte import compilation_cache
from vte.openb.kube.extender import BODY_TIMEOUT_S, MAX_BODY_BYTES


def build(args) -> tuple:
    """(app, name, binder) from parsed arguments; ValueError naming the bad flag."""
    from vte.openb.kube import objects
    from vte.openb.kube.convention import Convention
    from vte.openb.kube.extender import Extender, create_app
    from vte.openb.kube.twin import Twin
    from vte.openb.__main__ import make_policy
    from vte.openb.power import BUNDLED_MODELS
    from vte.openb.trace import load_nodes, load_pods
    from vte.openb.workload import typical_pods

    convention = Convention.load(args.convention, gpu_milli=args.gpu_milli_key,
                                 gpu_count=args.gpu_count_key, gpu_model=args.gpu_model_key,
                                 gpu_index=args.gpu_index_key)
    nodes, pods = ([], []) if args.snapshot is None else objects.split(
        objects.load_items(args.snapshot), convention)
    models = objects.vocabulary([n.model for n in nodes] + [m for p in pods for m in p.models],
                                args.models.split(",") if args.models else BUNDLED_MODELS)
    if args.typical == "snapshot":
        if args.snapshot is None:
            raise ValueError("--typical snapshot needs --snapshot")
        _, table = objects.tables(nodes, pods, args.snapshot, models)
    else:
        bundled = load_nodes("gpu")
        import dataclasses
        table = load_pods(args.typical, dataclasses.replace(bundled, models=models))
    try:
        policy = make_policy(args.policy, models)
    except ValueError as err:
        raise ValueError(f"--policy: {err}") from None
    twin = Twin(policy, typical_pods(table), models, seed=args.seed)
    for row in nodes:
        reason = twin.add_node(row)
        if reason:
            logging.getLogger("vte.openb.kube").warning("node %s: %s", row.name, reason)
    for row in pods:
        reason = twin.observe(row)
        if reason:
            logging.getLogger("vte.openb.kube").warning("snapshot: %s", reason)
    binder = watcher = None
    if args.kubeconfig or args.in_cluster or args.watch:
        from vte.openb.kube.client import Binder, PodWatcher, load_api
        api = load_api(args.kubeconfig, args.in_cluster)
        binder = Binder(api, convention)
        if args.watch:
            watcher = PodWatcher(api, twin, convention)
    sizes = [int(x) for x in args.warmup_nodes.split(",") if x.strip()]
    app = create_app(Extender(twin, convention, binder), args.policy, args.url_prefix,
                     warm_sizes=sizes, max_body_bytes=args.max_body_bytes,
                     body_timeout_s=args.body_timeout_s,
                     on_start=None if watcher is None else watcher.start)
    return app, args.policy, binder


def parser() -> argparse.ArgumentParser:
    from vte.serve import server as srv
    p = argparse.ArgumentParser(prog="python -m vte.serve --protocol kube-extender",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="a policy name of python -m vte.openb")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--url-prefix", default="", help="path before the verbs (the "
                   "extender's urlPrefix path), e.g. /vte")
    p.add_argument("--snapshot", default=None, help="kubectl get nodes,pods -A -o json")
    p.add_argument("--watch", action="store_true", help="list and watch pods (kube client)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig of the kube client")
    p.add_argument("--in-cluster", action="store_true", help="the pod's service account")
    p.add_argument("--typical", default="default", help="trace of FGD's typical pods: a "
                   "bundled name, a CSV path, or 'snapshot' (default: default)")
    p.add_argument("--models", default=None, help="the GPU model vocabulary, comma-separated "
                   "(default: the bundled OpenB models and any model of the snapshot)")
    p.add_argument("--convention", default=None, help="JSON file of convention fields")
    for key, text in (("milli", "milli-GPU per GPU"), ("count", "GPU count"),
                      ("model", "GPU model"), ("index", "chosen GPU indices")):
        p.add_argument(f"--gpu-{key}-key", default=None,
                       help=f"annotation/label/resource name of the {text}")
    p.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", default=None, help="the certificate's private key (PEM)")
    p.add_argument("--warmup-nodes", default="", help="node counts compiled at start "
                   "besides the snapshot's (comma-separated)")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES,
                   help=f"largest request body (default {MAX_BODY_BYTES}; 413 beyond)")
    p.add_argument("--body-timeout-s", type=float, default=BODY_TIMEOUT_S)
    p.add_argument("--header-timeout-s", type=float, default=srv.HEADER_TIMEOUT_S)
    p.add_argument("--idle-timeout-s", type=float, default=srv.IDLE_TIMEOUT_S)
    p.add_argument("--max-connections", type=int, default=srv.MAX_CONNECTIONS)
    p.add_argument("--seed", type=int, default=0, help="key of randomised policies and of "
                   "the tie-break ranks")
    p.add_argument("--log-level", default="warning",
                   choices=["critical", "error", "warning", "info", "debug"])
    compilation_cache.add_flag(p, "a restarted extender (the same policy and node counts)")
    return p


def main(argv: list[str] | None = None) -> None:
    try:
        from vte.serve import server as srv
    except ImportError as err:
        sys.exit(f"the kube extender needs the serve extra (pip install 'vte[serve]'): {err}")
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(levelname)s: %(name)s: %(message)s")
    if (args.tls_cert is None) != (args.tls_key is None):
        sys.exit("error: --tls-cert and --tls-key go together")
    _, sock = srv.checked_bind(args.host, args.port, lambda: srv.protocol(
        args.header_timeout_s, args.max_connections))
    compilation_cache.use(getattr(args, "compilation_cache", None))   # before any compile
    try:
        app, name, binder = build(args)
    except (ValueError, OSError, ImportError) as err:
        sock.close()
        sys.exit(f"error: {err}")
    scheme = "https" if args.tls_cert else "http"
    print(f"kube-scheduler extender {name!r} on {scheme}://{args.host}:"
          f"{sock.getsockname()[1]}{'/' + args.url_prefix.strip('/') if args.url_prefix.strip('/') else ''}"
          f" ({'binding through the API server' if binder else 'recording binds only'}; "
          "GET /health: 503 until compiled)", file=sys.stderr)
    serve(app, sock, args)


def serve(app, sock, args) -> None:
    """uvicorn on the bound socket with the serve package's guards, HTTPS when asked."""
    import gc

    import uvicorn

    from vte.serve import server as srv
    gc.collect()
    gc.freeze()
    gc.set_threshold(*srv.GC_THRESHOLD)
    config = uvicorn.Config(app, http=srv.protocol(args.header_timeout_s, args.max_connections),
                            timeout_keep_alive=args.idle_timeout_s, log_level=args.log_level,
                            lifespan="on", ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key)
    uvicorn.Server(config).run(sockets=[sock])


__all__ = ["main", "build", "parser"]
