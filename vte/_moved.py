"""Old module paths, kept working: the synthetic cluster's modules moved from `vte/` to
the package `vte/cluster/`, and OpenB's experiments to `vte/openb/lab/`.

`import vte.scoring` (or `from vte import heuristics`) still gives the module, now
`vte.cluster.scoring`, with a DeprecationWarning naming the new path. The finder is
installed by `import vte`; this module imports nothing of vte.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    **{f"vte.{name}": f"vte.cluster.{name}" for name in (
        "params", "types", "catalogue", "scenario", "scoring", "dynamics", "twin",
        "observation", "fusion", "heuristics", "network", "assignment", "env", "export",
        "compiled")},
    "vte.reference_numpy": "vte.cluster.reference",
    "vte.synthetic": "vte.cluster.registration",
    "vte.adapters.specs": "vte.cluster.spaces",
    **{f"vte.openb.{name}": f"vte.openb.lab.{name}" for name in (
        "experiment", "power_experiment", "bound", "lookahead", "published", "cache",
        "simulator")},
    **{f"vte.serve.{name}": f"vte.cluster.decice.{name}" for name in (
        "app", "convert", "place", "schemas")},
    **{f"train.{name}": f"vte.train.{name}" for name in (
        "config", "core", "envs", "run", "multihost", "tensorboard")},
}


def moved(old: str) -> str:
    """The new path of a module that moved (DeprecationWarning naming it)."""
    new = MOVED[old]
    warnings.warn(f"{old} moved to {new}; import {new}", DeprecationWarning, stacklevel=3)
    return new


class _Loader(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        return importlib.import_module(self.new)

    def exec_module(self, module):      # the new module is executed already
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _Loader(moved(fullname)))


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
