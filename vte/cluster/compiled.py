"""The public functions, compiled: fast when research code calls them in plain Python loops.

`vte.reset`, `vte.step`, `vte.step_env`, `vte.reward`, `vte.get_obs`, `vte.rescore`,
`vte.node_costs` and `vte.optimal_action` are `jax.jit` of the functions in `vte.cluster.env`,
`vte.cluster.observation` and `vte.cluster.scoring`. The shape-deciding fields of `EnvParams`
(`num_nodes`, `queue_len`, ...) are static (part of its pytree structure), the other fields
are traced, so a new float value does not recompile. The first call of each shape (of the
params' static fields and the state's arrays) compiles the function once, a few seconds on
a CPU; every later call of that shape runs the compiled program (kept for the process;
`jax.config.update("jax_compilation_cache_dir", DIR)` keeps it across processes). Inside the caller's own `jit` or
`vmap` (any traced argument) they call the plain functions, so nothing changes there; and
every check that raises before any work still raises: shapes and dtypes are checked while
tracing, and a concrete action too wide for int32 is turned into an invalid action before
JAX would cast it.
"""

from __future__ import annotations

from vte.cluster import env as _env
from vte.cluster import observation as _observation
from vte.cluster import scoring as _scoring
from vte.environment import eager_jit as _public


def _with_action(fn):
    return _public(fn, "action")


reset = _public(_env.reset)
step = _with_action(_env.step)
step_env = _with_action(_env.step_env)
reward = _with_action(_env.reward)
rescore = _public(_env.rescore)
get_obs = _public(_observation.get_obs)
node_costs = _public(_scoring.node_costs)
optimal_action = _public(_scoring.optimal_action)

__all__ = ["reset", "step", "step_env", "reward", "rescore", "get_obs", "node_costs",
           "optimal_action"]
