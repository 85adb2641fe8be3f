"""Cluster-v0: vte's synthetic heterogeneous cluster (cloud, edge, HPC) whose optimal
decision is known. The model and its formulas: `vte/cluster/MODEL.md`.

    env, params = vte.make("Cluster-v0", num_nodes=64)      # the registry's way
    from vte.cluster import EnvParams, reset, step          # this package's own functions

Modules, from the bottom up: `params` (EnvParams, the shape-deciding and traced fields),
`types` (the state pytrees), `catalogue` (node and request archetypes), `scenario`
(sampling), `scoring` (every action's cost and the optimum), `dynamics` (time, arrivals,
failures), `twin` (the digital twin), `fusion`, `observation`, `env` (reset/step),
`compiled` (the eager jitted functions), `heuristics`, `network`, `assignment` (the
batch optimum), `reference` (a NumPy oracle), `spaces` (observation bounds), `evaluate`
and `evaluate_cli`, `viewer` (pictures), `export` (DECICE snapshots) and `registration`
(what the tools need of it, `vte.registry`). `vte.reset`, `vte.step`, `vte.EnvParams`
... are this package's.
"""

from __future__ import annotations

import importlib
import importlib.util

from vte.cluster.compiled import (get_obs, node_costs, optimal_action, rescore, reset, reward,
                                  step, step_env)
from vte.cluster.params import EnvParams, num_actions
from vte.cluster.types import (Cluster, Counters, EnvState, HeadScores, Metrics, Nodes,
                               Observation, Requests, Twin)

def __getattr__(name):
    # Its modules as attributes on first use (`vte.cluster.heuristics.ALL`), as `import
    # vte.cluster.heuristics` would.
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EnvParams", "num_actions", "reset", "step", "step_env", "reward", "get_obs",
           "rescore", "node_costs", "optimal_action", "Cluster", "Counters", "EnvState",
           "HeadScores", "Metrics", "Nodes", "Observation", "Requests", "Twin"]
