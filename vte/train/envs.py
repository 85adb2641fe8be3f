"""A registered environment as the trainers see it (`TrainEnv`), built from the registry.

    env = make_env(config)                       # --env names a `vte.registry` registration
    obs, state = env.reset(key)                  # one environment; the trainer vmaps
    label = env.teacher(key, state, obs)         # the teacher's action, or env.teacher None
    label, cost = env.labels(keys, states, obs)  # batched, with every action's cost or None
    obs, state, reward, terminated, truncated, info = env.step(key, state, action)
    scalars = env.stats(logits, action, label, info, done)     # batched over environments

Nothing here knows an environment by name: the registration gives the environment and its
training params (`run_params`, the trace of an OpenB run loaded once), the network, the
reward trainers optimise (`train_reward`, e.g. OpenB's % of the GPUs), the reference
policies a teacher is chosen from, the per-step metrics (reduced to scalars inside the
rollout's scan) and the evaluation of a finished run.

The teacher is explicit, `(key, state, obs) -> action` (`obs` the observation of `state`),
owned by the trainer: imitation's `--teacher` (the environment's default teacher without
one); for PPO the environment's known optimum when it has one (`Registration.optimum`, only
monitored as `greedy_match`). A teacher the registration can read off the observation
(`Registration.observed_policies`, e.g. OpenB's FGD) is read there, not computed again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import importlib
import io
import json
import os
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp

from vte.files import atomic_write_text
from vte.registry import Registration, registration


@dataclasses.dataclass(frozen=True)
class TrainEnv:
    """One registered environment with a run's params, for the trainers (one environment
    per call; the trainers vmap)."""

    registration: Registration
    env: Any                   # a `vte.environment.Environment`
    params: Any                # its training params
    network: Any               # flax module: obs -> (masked logits (..., A), value (...))
    teacher: Callable | None   # (key, state, obs) -> () int32 action, the label; None: no label
                               # (with teacher_costs, -> (action, (A,) cost of every action))
    curves: tuple              # (metric, title, short name) of the learning curve, any number
    teacher_costs: bool = False   # the teacher gives every action's cost with its label

    def reset(self, key):
        return self.env.reset(key, self.params)

    def step(self, key, state, action):
        """`env.step`, with the reward the trainer optimises (`train_reward`)."""
        obs, new, reward, terminated, truncated, info = self.env.step(key, state, action,
                                                                       self.params)
        if self.registration.train_reward is not None:
            reward = self.registration.train_reward(state, reward, self.params)
        return obs, new, reward, terminated, truncated, info

    @property
    def reward(self) -> Callable | None:
        """(state, action) -> the reward `step` would give, without stepping; None when the
        environment cannot score an action without a step."""
        fn = self.registration.reward_fn
        return None if fn is None else (lambda state, action: fn(state, action, self.params))

    @property
    def action_costs(self) -> Callable | None:
        """(state) -> (A,) cost of every action (+inf where invalid), or None."""
        fn = self.registration.action_costs
        return None if fn is None else (lambda state: fn(state, self.params))

    @property
    def has_costs(self) -> bool:
        """Whether `labels` gives every action's cost (for a distillation loss)."""
        return self.teacher_costs or self.action_costs is not None

    def labels(self, keys, states, obs):
        """(label, cost) of a batch of states: label (B,) int32 the teacher's action or None
        without a teacher; cost (B, A) float32 every action's cost, from the teacher when it
        gives them (`teacher_costs`), else the environment's (`action_costs`), or None."""
        if self.teacher is not None and self.teacher_costs:
            return jax.vmap(self.teacher)(keys, states, obs)
        label = jax.vmap(self.teacher)(keys, states, obs) if self.teacher is not None else None
        costs = (jax.vmap(self.action_costs)(states) if self.action_costs is not None
                 else None)
        return label, costs

    def stats(self, logits, action, label, info: dict, done) -> dict:
        """The scalars each rollout step logs (batched over environments): the
        environment's metrics, and with a teacher how often the behaviour and the greedy
        action take its action."""
        out = dict(self.registration.metrics(info, done))
        if label is not None:
            out["match_rate"] = (action == label).mean()
            out["greedy_match"] = (jnp.argmax(logits, -1) == label).mean()
        return out

    def evaluate(self, config, params, out: str) -> dict:
        """The registration's evaluation of the trained seeds; writes out/eval.json (and
        any eval_*.json of it) and prints its table, the trained seeds named by the run
        (`trained_names`: the run directory's name, `NAME_seedS` for seed S > 0) where the
        registration calls them `policy` (`OLD_NAMES`); `trained_entry` finds a seed's row
        whatever its name. Returns the results, as written."""
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            results = self.registration.evaluate(config, params, out)
        printed = buffer.getvalue()
        for path in sorted(glob.glob(os.path.join(out, "eval*.json"))):
            with open(path) as f:
                old = json.load(f)
            entries = _entries(old)
            mapping = _renaming(entries, run_name(out), config.seeds) if entries else {}
            if not mapping:
                continue
            new = _renamed(old, mapping)
            atomic_write_text(path, json.dumps(new, indent=1 if "policies" in new else 2))
            before, after = _table(old, self.registration), _table(new, self.registration)
            if before and before in printed:
                printed = printed.replace(before, after)
            if os.path.basename(path) == "eval.json":
                results = _renamed(results, mapping)
        sys.stdout.write(printed)
        sys.stdout.flush()
        return results


def run_name(out: str) -> str:
    """The name a run's trained policy goes by: its directory's name."""
    return os.path.basename(os.path.normpath(os.path.abspath(out)))


# What a registration's evaluation calls the trained seeds, renamed after the run (vte's
# synthetic cluster's; OpenB's "learned" rows keep their name, which its power experiments
# and their tests read).
OLD_NAMES = ("policy",)


def trained_names(out: str, seeds: int, taken=()) -> list[str]:
    """The evaluation's names of a run's trained seeds: the run directory's name for seed
    0, `NAME_seedS` for the others (`NAME_run` where the name is already a policy's)."""
    base = run_name(out)
    if base in taken or base in OLD_NAMES:
        base += "_run"
    return [base if s == 0 else f"{base}_seed{s}" for s in range(seeds)]


def trained_entry(results: dict, run_dir: str, seed: int = 0):
    """The entry of seed `seed` of a run in its evaluation (`eval.json`), whichever name it
    has: the run's (`trained_names`), or `policy` / `policy_seedS` in files written before
    the rows were named by the run (`learned` / `learned_seedS`: OpenB's); None when
    absent."""
    entries = _entries(results) or {}
    for old in OLD_NAMES + ("learned",):
        olds = {s: old if s == 0 else f"{old}_seed{s}" for s in range(seed + 1)}
        if olds[seed] in entries:
            return entries[olds[seed]]
    base = run_name(run_dir)     # "NAME_run" where NAME was a policy's, else NAME
    for names in (trained_names(run_dir, seed + 1, {base}), trained_names(run_dir, seed + 1)):
        if names[seed] in entries:
            return entries[names[seed]]
    return None


def _entries(result: dict) -> dict | None:
    """The policy -> metrics part of an evaluation: the run_grid layout's "policies", else
    the whole (vte.evaluate's)."""
    inner = result.get("policies") if isinstance(result, dict) else None
    return inner if isinstance(inner, dict) else result


def _renaming(entries: dict, base: str, seeds: int) -> dict:
    """old name -> new of the trained seeds found in `entries` (none: {})."""
    for old in OLD_NAMES:
        olds = [old if s == 0 else f"{old}_seed{s}" for s in range(seeds)]
        if all(o in entries for o in olds):
            taken = set(entries) - set(olds)
            new = trained_names(base, seeds, taken)
            return dict(zip(olds, new))
    return {}


def _renamed(result: dict, mapping: dict) -> dict:
    """`result` with the entries of `mapping` renamed, in their order."""
    def rename(d):
        return {mapping.get(k, k): v for k, v in d.items()}
    if isinstance(result.get("policies"), dict):
        return {**result, "policies": rename(result["policies"])}
    return rename(result)


def _table(result: dict, registration) -> str | None:
    """The text table the environment's evaluation prints of `result`."""
    try:
        return importlib.import_module(registration.evaluate_module).table(result)
    except (KeyError, TypeError, ValueError):
        return None


def teacher_curve(algorithm: str, name: str) -> tuple:
    """The learning-curve panel of `greedy_match`: imitation learns the teacher's action,
    PPO never sees it (the environment's optimum, monitored only)."""
    if algorithm == "imitate":
        title = f"greedy action = the teacher's ({name}): share of decisions"
    else:
        title = (f"greedy action = the {name} one: share of decisions "
                 "(monitored, not trained on)")
    return ("greedy_match", title, "match")


LOSS_TITLES = {"ppo": "PPO loss: clipped surrogate + vf_coef * value - ent_coef * entropy",
               "imitate": "imitation loss: cross-entropy to the teacher + vf_coef * value"}


def loss_curve(algorithm: str, distill: bool = False) -> tuple:
    title = LOSS_TITLES.get(algorithm, "loss")
    if algorithm == "imitate" and distill:
        title += " + distillation"
    return ("loss", title, "loss")


def make_env(config) -> TrainEnv:
    """The training environment `config.env` names, with the run's teacher."""
    reg = registration(config.env)
    env, params = reg.run_params(config, True)
    name = getattr(config, "teacher", None) or reg.optimum
    teacher, costs = None, False
    observed = reg.observed_policies() if reg.observed_policies is not None else {}
    if name in observed:
        read = observed[name]
        teacher = lambda key, state, obs: read(key, obs, params)   # noqa: E731
    elif name is not None:
        built = reg.teacher_action(name, config) if reg.teacher_action is not None else None
        act = built if built is not None else reg.policies()[name]
        teacher = lambda key, state, obs: act(key, state, params)   # noqa: E731
        costs = getattr(act, "gives_costs", False)
    algorithm = getattr(config, "algorithm", "")
    distill = (getattr(config, "distill_temp", 0) > 0
               and (costs or reg.action_costs is not None))
    curves = (((teacher_curve(algorithm, name),) if teacher is not None else ())
              + tuple(reg.curves) + (loss_curve(algorithm, distill),))
    return TrainEnv(registration=reg, env=env, params=params,
                    network=reg.network(config.hidden), teacher=teacher, curves=curves,
                    teacher_costs=costs)
