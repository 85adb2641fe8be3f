"""The evaluation front door: schedulers side by side on the same held-out scenarios.

    results = vte.evaluate({"kube": "kube_default", "opt": "optimal"}, params, key, 64)
    python -m vte.evaluate --episodes 64 --seed 12345          # every heuristic, Cluster-v0
    python -m vte.evaluate --env openb --policies all          # the OpenB replay grid

`vte.evaluate(policies, params, key, num_episodes)` compares policies on Cluster-v0
(`vte.cluster.evaluate`, where the metrics are defined); `python -m vte.evaluate --env
NAME` runs the evaluation command of any registered environment (its registration's
`evaluate_main`). This module reaches the environments through the registry only.
"""

from __future__ import annotations

import importlib
import sys
import types

from vte import registry

DEFAULT_ENV = "Cluster-v0"


def _harness():
    """The module of Cluster-v0's comparison (`vte.cluster.evaluate`), by its registration."""
    return importlib.import_module(registry.registration(DEFAULT_ENV).evaluate_module)


def evaluate(policies, params, key, num_episodes: int = 64, **kwargs) -> dict:
    """Every policy of `policies` (name -> callable `(key, obs, params) -> action`, a
    heuristic's name, or "optimal") on the same `num_episodes` held-out Cluster-v0
    episodes of `params`; name -> metric -> float (`vte.cluster.evaluate.evaluate`)."""
    return _harness().evaluate(policies, params, key, num_episodes, **kwargs)


def table(results) -> str:
    """The Markdown table of `evaluate`'s results."""
    return _harness().table(results)


def __getattr__(name):          # COLUMNS, METRICS, OPTIMAL: the harness's own
    if name in ("COLUMNS", "METRICS", "OPTIMAL"):
        return getattr(_harness(), name)
    raise AttributeError(f"module 'vte.evaluate' has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """This module, callable: `vte.evaluate(policies, params, key, episodes)` is `evaluate`."""

    def __call__(self, policies, params, key, num_episodes: int = 64, **kwargs) -> dict:
        return evaluate(policies, params, key, num_episodes, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["evaluate", "table"]
