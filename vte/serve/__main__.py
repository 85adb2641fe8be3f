"""`python -m vte.serve [--protocol NAME] ...`: serve a trained or reference scheduler.

    python -m vte.serve --policy runs/ppo                                   # DECICE's API
    python -m vte.serve --protocol kube-extender --policy zoo:openb-evidence  # Kubernetes

Each protocol belongs to the environment whose schedulers it serves (its registration's
`protocols`): `decice` (the default) is Cluster-v0's, `vte.cluster.decice`; `kube-extender`
is OpenB-v0's, `vte.openb.kube`. `--protocol NAME --help` lists a protocol's own flags.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from vte import registry

DEFAULT = "decice"


def main(argv: list[str] | None = None):
    argv = sys.argv[1:] if argv is None else list(argv)
    known = registry.protocols()
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--protocol", choices=sorted(known), default=DEFAULT)
    args, rest = first.parse_known_args(argv)
    module, _, function = known[args.protocol].partition(":")
    return getattr(importlib.import_module(module), function)(rest)


if __name__ == "__main__":
    main()
