"""The OpenB replay: Alibaba's production GPU-cluster trace and the FGD paper's experiment.

    from vte import openb
    nodes = openb.load_nodes("gpu")                 # 1213 nodes, 6212 GPUs (bundled)
    pods = openb.load_pods("default", nodes)        # 8152 pods (bundled) or any file by path
    result = openb.run_grid(nodes, pods, ["best_fit", "fgd"], seeds=range(42, 52))

`python -m vte.openb --pods default --policies all --seeds 10` runs the published grid and
prints it next to the paper's figures. Formulas: `vte/openb/OPENB.md`.
"""

from vte.openb.lab import published
from vte.openb.lab.experiment import run_grid
from vte.openb.cluster import Pod, Spec, State, Typical, feasible, make_spec, place, select
from vte.openb.policies import POLICIES, Policy
from vte.openb.lab.simulator import Log, binned, curves, replay
from vte.openb.trace import NodeTable, PodTable, TraceError, load_nodes, load_pods
from vte.openb.workload import Workload, build_workload, pod_arrays, typical_pods

__all__ = [
    "load_nodes", "load_pods", "NodeTable", "PodTable", "TraceError",
    "Pod", "Spec", "State", "Typical", "make_spec", "feasible", "place", "select",
    "POLICIES", "Policy", "Workload", "build_workload", "pod_arrays", "typical_pods",
    "Log", "replay", "binned", "curves", "run_grid", "published",
]


def __getattr__(name):
    # The experiments moved to `vte.openb.lab`: `vte.openb.experiment` and the others
    # still resolve, with a DeprecationWarning naming the new path.
    if name in ("experiment", "power_experiment", "bound", "lookahead", "cache", "simulator"):
        import importlib
        import warnings
        warnings.warn(f"vte.openb.{name} moved to vte.openb.lab.{name}; import "
                      f"vte.openb.lab.{name}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(f"vte.openb.lab.{name}")
    raise AttributeError(f"module 'vte.openb' has no attribute {name!r}")
