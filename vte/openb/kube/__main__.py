"""`python -m vte.openb.kube export`: a trace as Node and Pod YAML (the FGD simulator's form).

    python -m vte.openb.kube export --pods default --out DIR [--nodes gpu] [--namespace default]
        [--scheduler-name vte-scheduler]

writes DIR/nodes.yaml (one v1.Node per node of --nodes) and DIR/pods.yaml (one v1.Pod per
pod of --pods, in file order): the objects `vte.openb.kube.objects` reads back, so
`python -m vte.openb --cluster DIR` replays the trace itself. `kubectl apply
--dry-run=client -f DIR` accepts both files (pods: one container, requests = limits, the
GPU annotations; nodes: allocatable and capacity with the GPU count and milli).
"""

from __future__ import annotations

import argparse
import os
import sys

from vte.files import atomic_write_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vte.openb.kube", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="write a trace as Node and Pod YAML")
    export.add_argument("--pods", default="default", help="a bundled trace name or a CSV path")
    export.add_argument("--nodes", default="gpu", help="'gpu', 'all' or a node CSV path")
    export.add_argument("--out", required=True, help="directory to write (made if missing)")
    export.add_argument("--namespace", default="default", help="the pods' namespace")
    export.add_argument("--scheduler-name", default=None, help="the pods' spec.schedulerName "
                        "(the scheduler profile that asks the extender; default: none)")
    args = parser.parse_args(argv)

    from vte.openb.kube.objects import node_objects, pod_objects, to_yaml
    from vte.openb.trace import TraceError, load_nodes, load_pods
    try:
        nodes = load_nodes(args.nodes)
        pods = load_pods(args.pods, nodes)
        texts = {"nodes.yaml": to_yaml(node_objects(nodes)),
                 "pods.yaml": to_yaml(pod_objects(pods, namespace=args.namespace,
                                                   scheduler_name=args.scheduler_name))}
        os.makedirs(args.out, exist_ok=True)
    except (ValueError, TraceError, OSError) as err:
        sys.exit(f"error: {err}")
    for name, text in texts.items():
        atomic_write_text(os.path.join(args.out, name), text)
    print(f"wrote {len(nodes)} nodes and {len(pods)} pods to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    main()
