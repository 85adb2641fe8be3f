"""The registry: every environment found by name, with everything a tool needs to use it.

    env, params = vte.make("Cluster-v0", num_nodes=16)            # like gymnax.make
    env, params = vte.make("OpenB-v0", pods="default", subset=64)
    vte.registered()                                              # ("Cluster-v0", "OpenB-v0")

A `Registration` names the environment's constructor, its own training flags (their
validation and their section of a run's `config.json`), its network, its reference
policies (one signature: `(key, state, params) -> action`), how a trained run on it is
evaluated and loaded, and what it offers the tools (a picture, the protocols of `vte.serve`). Trainers,
`vte.evaluate`, `vte.render`, `vte.load_policy`, the adapters and `vte.serve` ask the
registry instead of comparing environment names; a new environment is one registration.

Registrations load lazily: `register(id, "module:attribute")` records where one lives and
imports it on first use, so `import vte` imports no environment package.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Mapping


class FlagError(ValueError):
    """A bad command-line value. `name` is the flag's field name, `value` its value and
    `depends` the other flags whose values make it invalid (a cross-check), so a tool can
    say which flag the user passed made a default invalid."""

    def __init__(self, name: str, value, allowed: str, depends: tuple[str, ...] = ()):
        super().__init__(f"--{name.replace('_', '-')}={value!r} is invalid: allowed {allowed}")
        self.name, self.value, self.allowed, self.depends = name, value, allowed, depends


def flag_error(name: str, value, allowed: str, depends: tuple[str, ...] = ()) -> FlagError:
    """The one error of a bad command-line value: names the flag, its value and what is
    allowed (`vte.train.config` and every registration use it); `depends` names the other
    flags of a cross-check (e.g. ("num_envs", "num_steps") for --num-minibatches)."""
    return FlagError(name, value, allowed, depends)


@dataclasses.dataclass(frozen=True)
class Registration:
    """One environment and what the tools need of it. Callables take a run's
    configuration where named `config` (an object with the run's flags as attributes,
    e.g. `vte.train.config.PPOConfig`)."""

    id: str                              # "Cluster-v0"
    flag: str                            # its name on the command line: --env synthetic
    summary: str                         # one line for --help and `vte.registered`
    make: Callable[..., tuple]           # (**overrides) -> (env, params)
    config: type                         # its section of a run's configuration: a frozen
                                         # dataclass of `vte.config.option`s whose names
                                         # are `make`'s keywords and the flags; stored
                                         # under "env" in config.json
    check_config: Callable[[Any], None]  # raise `flag_error` on a bad flag of a run
    run_params: Callable[[Any, bool], tuple]   # (config, train) -> (env, params) of a
                                         # run's training (train=True) or evaluation
    network: Callable[[int], Any]        # hidden width -> flax module: obs -> (logits, value)
    policies: Callable[[], Mapping[str, Callable]]   # reference policies by name,
                                         # (key, state, params) -> () int32 action
    default_policy: str                  # the reference policy tools show by default
    teachers: tuple[str, ...]            # the reference policies imitation may learn from
    default_teacher: str                 # the label of `train/imitate.py` by default
    metrics: Callable[[dict, Any], dict]  # (step info, done) -> per-step scalars of a
                                         # batch; NAME_sum over ended episodes + "episodes"
    curves: tuple                        # (metric, title, short name) of the learning curve
    evaluate: Callable                   # (config, stacked network variables, out dir) ->
                                         # results dict; writes out/eval.json
    load_policy: Callable                # (run config dict, variables, greedy) -> policy
    as_action: Callable                  # a loaded policy -> (key, state, params) -> action
    run_make: Callable                   # run config dict -> the `make` keywords of the
                                         # environment it evaluates on
    observed_policies: Callable[[], Mapping[str, Callable]] | None = None
                                         # reference policies read off the observation of
                                         # the state, (key, obs, params) -> the same action
                                         # as `policies()`' of that name: a trainer labels
                                         # with these, sharing the observation's work
    teacher_action: Callable[[str, Any], Callable] | None = None
                                         # (teacher name, config) -> action of a teacher
                                         # built from the run's configuration (OpenB: the
                                         # planners, "plan_fgd" and "plan:<base>", with the
                                         # run's --plan-* settings), or None for a name
                                         # `policies()` holds as it is; None: those only
    planner: type | None = None          # the settings of its planning teachers (a
                                         # section: the --plan-* flags, config.json's
                                         # "plan"); None: no teacher plans
    plans: Callable[[str], bool] | None = None   # teacher name -> whether it plans
    renamed: Mapping[str, str] = dataclasses.field(default_factory=dict)
                                         # old name -> new name of its section's fields:
                                         # old flags and config.json keys still load
    optimum: str | None = None           # the reference policy that is the known optimum
                                         # (PPO monitors its match), None: none known
    train_reward: Callable | None = None   # (state before, reward, params) -> the reward
                                         # trainers optimise; None: the environment's own
    reward_fn: Callable | None = None    # (state, action, params) -> reward without
                                         # stepping, or None (PPO's --all-actions needs it)
    action_costs: Callable | None = None  # (state, params) -> (A,) cost of every action
                                         # (+inf where invalid), or None (imitation's
                                         # distillation needs it)
    render: Callable | None = None       # (state, params, action=None, reference=None)
                                         # -> matplotlib Figure
    protocols: Mapping[str, str] = dataclasses.field(default_factory=dict)
                                         # what `python -m vte.serve --protocol NAME`
                                         # serves of it: NAME -> "module:function", the
                                         # function main(argv) of that server
    init_check: Callable | None = None   # (source run config dict, config) -> None, or
                                         # why --init-from that run cannot seed this one
    evaluate_main: str | None = None     # a module whose main(argv) is `python -m
                                         # vte.evaluate --env NAME ...`
    evaluate_module: str | None = None   # a module whose table(results) prints what
                                         # `evaluate` wrote (Cluster-v0's also has
                                         # evaluate(policies, params, key, episodes):
                                         # `vte.evaluate`)
    eval_episodes: int = 64              # held-out episodes of a run's evaluation when
                                         # --eval-episodes is not given
    small: Mapping[str, Any] = dataclasses.field(default_factory=dict)
                                         # `make` keywords of a small instance, which the
                                         # contract test (tests/test_contract.py) runs
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
                                         # its section's values of runs saved before a
                                         # field existed (`vte.train.config.env_section`)


_ENTRIES: dict[str, str | Registration] = {}     # id -> "module:attribute" or loaded
_FLAGS: dict[str, str] = {}                      # --env name -> id


def register(id: str, entry: str | Registration, flag: str) -> None:
    """Record an environment: `entry` is a `Registration` or where one lives
    ("package.module:NAME", imported on first use); `flag` its --env name."""
    if id in _ENTRIES or flag in _FLAGS:
        raise ValueError(f"environment {id!r} (--env {flag}) is registered already")
    _ENTRIES[id] = entry
    _FLAGS[flag] = id


def registered() -> tuple[str, ...]:
    """The ids of every registered environment, in registration order."""
    return tuple(_ENTRIES)


def flags() -> tuple[str, ...]:
    """The --env names of every registered environment."""
    return tuple(_FLAGS)


def registration(name: str) -> Registration:
    """The registration of an environment by id ("OpenB-v0") or --env name ("openb");
    ValueError naming the registered ones otherwise."""
    id = _FLAGS.get(name, name)
    if id not in _ENTRIES:
        raise ValueError(f"environment {name!r} is not registered: allowed one of "
                         f"{list(_ENTRIES)} (or --env {'/'.join(_FLAGS)})")
    entry = _ENTRIES[id]
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        _ENTRIES[id] = entry
    return entry


def make(name: str, **overrides) -> tuple[Any, Any]:
    """(env, params) of a registered environment, `overrides` naming its parameters
    (e.g. `num_nodes=16` for "Cluster-v0"; `pods`, `subset`, `seeds` for "OpenB-v0").
    Unknown or bad keywords raise ValueError naming them and what is allowed."""
    return registration(name).make(**overrides)


def protocols() -> dict[str, str]:
    """Every protocol `python -m vte.serve` speaks: NAME -> "module:function" (main(argv))
    of the registration that offers it (each name offered once)."""
    out = {}
    for id in _ENTRIES:
        for name, entry in registration(id).protocols.items():
            if name in out:
                raise ValueError(f"protocol {name!r} is offered by two environments")
            out[name] = entry
    return out


def of_run(config: Mapping) -> Registration:
    """The registration of a saved run, from its `config.json` ("env"/"name"; runs saved
    before the registry existed are synthetic ones)."""
    return registration(config.get("env", {}).get("name", "synthetic"))


# The built-in environments, imported on first use.
register("Cluster-v0", "vte.cluster.registration:REGISTRATION", flag="synthetic")
register("OpenB-v0", "vte.openb.registration:REGISTRATION", flag="openb")

__all__ = ["Registration", "register", "registered", "registration", "make", "flags",
           "of_run", "flag_error", "protocols"]
