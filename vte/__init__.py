"""VTE: a vectorized JAX training environment for ML job schedulers.

    import jax, vte
    env, params = vte.make("Cluster-v0", num_nodes=64)     # or "OpenB-v0"; vte.registered()
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

    params = vte.EnvParams(num_nodes=64, queue_len=8)       # the synthetic cluster's own
    obs, state = vte.reset(key, params)                     # functions, the same environment

Every public function is pure, deterministic per key, and works under `jax.jit` and
`jax.vmap`. The layout: `vte/` holds what every environment shares (the protocol
`vte.environment`, `vte.registry`, checkpoints, files, keys, the evaluate and render front
doors, the trainers `vte.train`); each environment is a package, `vte.cluster`
("Cluster-v0", its model in `vte/cluster/MODEL.md`) and `vte.openb` ("OpenB-v0").

A trained scheduler (`train/ppo.py`, `train/imitate.py`) loads as a policy in one call:

    policy = vte.load_policy("runs/ppo")       # (key, obs, params) -> action

and so does a scheduler shipped with vte, by its name in the zoo (`vte.zoo.names()`):

    policy = vte.load_policy("openb-evidence")  # or "zoo:openb-evidence"; vte.zoo.card(...)

Every name below loads on first use (`import vte` imports neither JAX nor an environment),
and old module paths (`vte.scoring`, `vte.heuristics`, ...) still import, with a
DeprecationWarning naming their new place in `vte.cluster`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

_MOVED = {
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


def _moved(old: str) -> str:
    """The new path of a module that moved (DeprecationWarning naming it)."""
    new = _MOVED[old]
    warnings.warn(f"{old} moved to {new}; import {new}", DeprecationWarning, stacklevel=3)
    return new


# Old module paths, kept working: the synthetic cluster's modules moved from `vte/` to the
# package `vte/cluster/`, OpenB's experiments to `vte/openb/lab/`, DECICE's service to
# `vte/cluster/decice/` and the trainers to `vte/train/`. `import vte.scoring` (or
# `vte.scoring`, `from vte import heuristics`) still gives the module, with a
# DeprecationWarning naming the new path.

class _Loader(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.spec = module.__spec__         # the import system sets the old one on it
        return module

    def exec_module(self, module):      # executed already: give it its own spec back
        module.__spec__, module.__loader__ = self.spec, self.spec.loader

    def get_code(self, fullname):        # `python -m OLD` runs the new module's code
        return importlib.util.find_spec(self.new).loader.get_code(self.new)

    def is_package(self, fullname):
        return False


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _Loader(_moved(fullname)))


def _install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


_install()

__version__ = "0.1.0"

# name -> "module" (the attribute is that module) or "module:attribute".
_LAZY = {
    # the registry: every environment by name
    "make": "vte.registry:make", "registered": "vte.registry:registered",
    "registration": "vte.registry:registration", "registry": "vte.registry",
    "Environment": "vte.environment:Environment",
    "load_policy": "vte.checkpoint:load_policy",
    "evaluate": "vte.evaluate",   # callable: vte.evaluate(...); `python -m vte.evaluate` the CLI
    "render": "vte.render", "zoo": "vte.zoo", "distributed": "vte.distributed",
    "rng": "vte.rng", "cluster": "vte.cluster", "openb": "vte.openb",
    **{name: f"vte.{name}" for name in (
        "environment", "checkpoint", "config", "files", "layers", "compilation_cache",
        "adapters", "serve", "train")},
    # Cluster-v0's own functions and types, at the top as they always were
    **{name: f"vte.cluster.compiled:{name}" for name in (
        "get_obs", "node_costs", "optimal_action", "rescore", "reset", "reward", "step",
        "step_env")},
    **{name: f"vte.cluster.assignment:{name}" for name in (
        "cost_matrix", "optimal_assignment", "score_assignment")},
    **{name: f"vte.cluster.observation:{name}" for name in (
        "NODE_FEATURE_NAMES", "NODE_FEATURES", "REQUEST_FEATURE_NAMES", "REQUEST_FEATURES")},
    "SchedulerNet": "vte.cluster.network:SchedulerNet",
    "make_policy": "vte.cluster.network:make_policy",
    "EnvParams": "vte.cluster.params:EnvParams", "num_actions": "vte.cluster.params:num_actions",
    "measure": "vte.cluster.dynamics:measure",
    **{name: f"vte.cluster.types:{name}" for name in (
        "Cluster", "Counters", "EnvState", "HeadScores", "Metrics", "Nodes", "Observation",
        "Requests", "Twin")},
}
# The synthetic cluster's modules, reachable as `vte.scoring` etc. as before the move
# (with a DeprecationWarning naming the new path).
_OLD = {old.removeprefix("vte."): old for old in _MOVED
        if old.count(".") == 1 and old.startswith("vte.")}


def __getattr__(name):
    target = _LAZY.get(name)
    if target is None and name in _OLD:
        target = _moved(_OLD[name])
    if target is None:
        raise AttributeError(f"module 'vte' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = importlib.import_module(module)
    if attr:
        value = getattr(value, attr)
    globals()[name] = value         # once: later lookups are plain attribute reads
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(name for name in _LAZY if name not in ("cluster", "openb"))
