"""VTE: a vectorized JAX training environment for ML job schedulers.

    import jax, vte
    env, params = vte.make("Cluster-v0", num_nodes=64)     # or "OpenB-v0"; vte.registered()
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

    params = vte.EnvParams(num_nodes=64, queue_len=8)       # the synthetic cluster's own
    obs, state = vte.reset(key, params)                     # functions, the same environment

Every public function is pure, deterministic per key, and works under `jax.jit` and
`jax.vmap`. The model and its formulas are documented in `vte/MODEL.md`.

A trained scheduler (`train/ppo.py`, `train/imitate.py`) loads as a policy in one call:

    policy = vte.load_policy("runs/ppo")       # (key, obs, params) -> action

and so does a scheduler shipped with vte, by its name in the zoo (`vte.zoo.names()`):

    policy = vte.load_policy("openb-evidence")  # or "zoo:openb-evidence"; vte.zoo.card(...)
"""

from __future__ import annotations

from vte import (catalogue, distributed, heuristics, observation, rng, scenario, scoring,
                 twin)
from vte import registry
from vte.environment import Environment
from vte.registry import make, registered, registration
from vte.assignment import cost_matrix, optimal_assignment, score_assignment
from vte.compiled import (get_obs, node_costs, optimal_action, rescore, reset, reward,
                          step, step_env)
from vte.evaluate import evaluate  # the function; `python -m vte.evaluate` is the CLI
from vte.observation import (NODE_FEATURE_NAMES, NODE_FEATURES, REQUEST_FEATURE_NAMES,
                             REQUEST_FEATURES)
from vte.network import SchedulerNet, make_policy
from vte.params import EnvParams, num_actions
from vte.dynamics import measure
from vte.types import (Cluster, Counters, EnvState, HeadScores, Metrics, Nodes, Observation,
                       Requests, Twin)

__version__ = "0.1.0"

# The built-in environments, imported on first use (`vte.registry`).
registry.register("Cluster-v0", "vte.synthetic:REGISTRATION", flag="synthetic")
registry.register("OpenB-v0", "vte.openb.registration:REGISTRATION", flag="openb")


def load_policy(run_dir: str, seed: int = 0, greedy: bool = True, step: int | None = None):
    """A trained policy `(key, obs, params) -> action` from a run directory, `DIR@STEP`, or
    a scheduler of the zoo by name (`"openb-evidence"`, `"zoo:openb-evidence"`: `vte.zoo`)
    (`vte.checkpoint.load_policy`; imported on first use, so `import vte` needs no orbax)."""
    from vte.checkpoint import load_policy as load
    return load(run_dir, seed=seed, greedy=greedy, step=step)


def __getattr__(name):
    # `vte.render` (pictures; imports matplotlib) loads on first use. The module is callable:
    # vte.render(state, params) -> Figure; vte.render.frame(...) -> (720, 1280, 3) uint8.
    # `vte.zoo` (the shipped schedulers: names, paths, cards) likewise.
    if name in ("render", "zoo"):
        import importlib
        return importlib.import_module("vte." + name)
    raise AttributeError(f"module 'vte' has no attribute {name!r}")

__all__ = [
    "make", "registered", "registration", "registry", "Environment",
    "EnvParams", "num_actions", "reset", "step", "step_env", "reward", "get_obs", "rescore",
    "node_costs", "optimal_action", "measure",
    "cost_matrix", "optimal_assignment", "score_assignment", "evaluate",
    "SchedulerNet", "make_policy", "load_policy",
    "Observation", "EnvState", "HeadScores", "Cluster", "Nodes", "Requests", "Twin", "Metrics", "Counters",
    "NODE_FEATURE_NAMES", "NODE_FEATURES", "REQUEST_FEATURE_NAMES", "REQUEST_FEATURES",
    "catalogue", "distributed", "heuristics", "observation", "rng", "scenario", "scoring", "twin",
]
