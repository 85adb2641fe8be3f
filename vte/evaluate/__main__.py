"""`python -m vte.evaluate [--env NAME] ...`: the evaluation command of a registered
environment (its registration's `evaluate_main`; Cluster-v0's by default:
`vte.cluster.evaluate_cli`, every heuristic against the optimum)."""

from __future__ import annotations

import argparse
import importlib
import sys

from vte import registry

DEFAULT_ENV = "Cluster-v0"


def main(argv: list[str] | None = None):
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", default=None, choices=registry.flags() + registry.registered())
    known, rest = pre.parse_known_args(argv)
    reg = registry.registration(known.env or DEFAULT_ENV)
    return importlib.import_module(reg.evaluate_main).main(rest)


if __name__ == "__main__":
    try:
        main()
    except ValueError as err:
        sys.exit(f"error: {err}")
