"""The registration of the OpenB trace replay, "OpenB-v0" (--env openb).

    env, params = vte.make("OpenB-v0", pods="default", subset=64)   # 16 workloads
    env, params = vte.make("OpenB-v0", pods="gpuspec10", seeds=range(100), tune=1.3)

Training (`train/*.py --env openb`): episodes replay workloads of the `--pods` pod file
on random sub-clusters of `--subset` GPU nodes (demand tuned to each sub-cluster,
`vte.openb.env.make_params(subset=...)`), one workload per seed 10_000 + i, i <
`--workloads`. The reward trainers optimise is the share of the sub-cluster's GPUs a
decision allocated, in percent (the environment's reward, GPUs, x 100 / the sub-cluster's
GPUs), so an episode's return is the published metric, GPU allocation at its end in %,
whatever the sub-cluster's size. Imitation learns from one of the six published policies
(`--teacher`, FGD by default) or from `preference_mix`, the PWR+FGD mix whose PWR weight
follows each episode's power preference (`--power-weight LOW HIGH`: each episode draws its
preference w uniformly in that range; a = `power.preference_weight(w)`), so that one
network learns every trade-off from FGD (w = 0) to PWR (w = 1), or from `plan_fgd`, the
lookahead planner over FGD (`vte.openb.lab.lookahead`: distilling its decisions into the network),
or from `plan:<base>`, the planner over a published policy or over the network of an OpenB
run directory, loaded once and held fixed (expert iteration: each round learns the planner
over the last round's network, `teacher_action`).

The observation encodes a node's GPU model as `--encoding` says (`vte.openb.env.ENCODINGS`):
agnostic by default (whether the pod may use the node's GPUs, their memory and watts from
the per-model table `vte.openb.power.GPU_MODELS`, so the network runs on clusters of other
GPU models), or onehot; config.json records it under "env", and a run saved before the
field existed is onehot (`encoding_of_config`).

`--pods` may join several pod files by commas (`--pods default,gpushare100`): the bank
then holds `--workloads` workloads of each, every one with its own trace's typical pods
(`vte.openb.env.make_params`), so one network learns them all.

The evaluation of a run (`eval.json`) replays the published seeds 42, 43, ...
(`--eval-episodes` of them, 10 by default) on the full cluster with
`vte.openb.lab.experiment.run_grid`: each trained seed's network beside the six published
policies, on the published metrics; with several traces, the first in `eval.json` and
each other in `eval_<trace>.json`. The trace is loaded once per run and node file.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import jax
import jax.numpy as jnp

from vte.config import check_fields, option
from vte.files import atomic_write_text
from vte.openb import env as oenv
from vte.registry import Registration, flag_error

TRAIN_SEED0 = 10_000        # training workloads: seeds 10_000 + i, apart from the published 42..
EVAL_SEED0 = 42             # the published seeds
EVAL_EPISODES = 10          # held-out workloads when --eval-episodes is not given
MAKE_WORKLOADS = 16         # workloads of `vte.make("OpenB-v0")` when no seeds are given
TEACHERS = ("random", "dot_product", "gpu_clustering", "gpu_packing", "best_fit", "fgd",
            "preference_mix", "plan_fgd")
PLAN = "plan:"              # a teacher "plan:<base>": the lookahead planner over a published
                            # policy or a trained run directory (`teacher_action`)


@dataclasses.dataclass(frozen=True)
class OpenBConfig:
    """OpenB-v0's section of a run's configuration (`--env openb`; "env" in config.json),
    under the names `vte.make("OpenB-v0", ...)` takes. `pods` was `--trace` and `subset`
    was `--num-nodes` (`RENAMED`: both still load, with a note)."""

    pods: str = option("default", "pod file: a bundled name (default, gpushare100, gpuspec33, "
                       "... the seventeen traces) or a CSV path; several joined by commas "
                       "train one network on workloads of each", group="environment")
    nodes: str = option("gpu", "node file: gpu (the paper's 1213 GPU nodes), all (with the "
                        "CPU-only nodes) or a CSV path", group="environment")
    subset: int = option(64, "nodes of each training sub-cluster, drawn at random from the "
                         "node file (the evaluation replays the full cluster)", low=1,
                         group="environment")
    workloads: int = option(256, "training workloads of the bank, one per seed 10000.."
                            "10000+W-1 and pod file (the evaluation replays the published "
                            "seeds 42, 43, ...)", low=1, group="environment")
    tune: float = option(1.3, "workload GPU demand / cluster GPUs", low=0.0, strict=True,
                         group="environment")
    power_weight: tuple[float, float] = option(
        (0.0, 0.0), "power preference range: each episode draws its weight w of the kW a "
        "decision adds against its GPUs uniformly in [LOW, HIGH], 0 <= LOW <= HIGH <= 1, "
        "shown to the policy (0 0: GPUs only)", group="environment", metavar=("LOW", "HIGH"))
    frag_shaping: float = option(0.0, "reward shaping: GPUs of reward per GPU of "
                                 "fragmentation a placement removes (FGD's gain at the chosen "
                                 "node; negative where it adds some), so each decision is "
                                 "credited with what it leaves for later pods (0: none)",
                                 low=0.0, group="environment")
    encoding: str = option(oenv.AGNOSTIC, "how a node's GPU model enters the observation: "
                           "agnostic, whether the pod may use its GPUs and their memory and "
                           "watts from the per-model table (vte.openb.power.GPU_MODELS), so the "
                           "network runs on clusters of other GPU models; onehot, a one-hot of "
                           "the node file's models (runs saved before this field)",
                           group="environment", choices=oenv.ENCODINGS)

    def __post_init__(self):
        check_fields(self)

    def summary(self) -> str:
        """What one environment is, for a trainer's first line and its curve's title."""
        return f"{self.subset} nodes of {self.nodes} ({self.pods})"


RENAMED = {"trace": "pods", "num_nodes": "subset"}   # old flag / config.json key -> field
SAVED_BEFORE_ENCODING = oenv.ONEHOT   # the encoding of a run whose config.json has none


@functools.lru_cache(maxsize=8)
def load_node_table(nodes: str = "gpu"):
    """The NodeTable of a node file (a bundled name or a CSV path), read once per process."""
    from vte.openb.trace import load_nodes
    return load_nodes(nodes)


@functools.lru_cache(maxsize=8)
def load_trace(pods: str = "default", nodes: str = "gpu"):
    """(NodeTable, PodTable) of a node file and a pod file (bundled names or CSV paths),
    read once per process for each pair: a run's checks, training and evaluation share it."""
    from vte.openb.trace import load_pods
    table = load_node_table(nodes)
    return table, load_pods(pods, table)


def make(pods: str = "default", nodes: str = "gpu", seeds=None, subset: int | None = None,
         tune: float = 1.3, invalid_penalty: float = 1.0, params=None,
         encoding: str = oenv.AGNOSTIC, workloads: int | None = None,
         power_weight=0.0, frag_shaping: float = 0.0):
    """(env, params): a bank of one workload per seed (`seeds`, or `workloads` seeds from
    10_000 as a run's --workloads; default 16) of the `pods` trace (several joined by commas: one workload per seed of
    each, `trace_names`) on the `nodes` file, each on a random `subset` of
    its nodes (None: the full cluster); or the environment of given `params` (an
    `OpenBParams`). `encoding`: how the observation encodes GPU models (`env.ENCODINGS`).
    Bad values raise ValueError naming them."""
    from vte.openb.trace import TraceError
    if params is not None:
        if not isinstance(params, oenv.OpenBParams):
            raise ValueError(f"params={type(params).__name__} is invalid: allowed "
                             "vte.openb.env.OpenBParams (vte.openb.env.make_params)")
        return oenv.OpenBEnv(params), params
    try:
        table, pod_table = load_traces(str(pods), str(nodes))
    except (TraceError, OSError) as err:
        raise ValueError(f"pods={pods!r}, nodes={nodes!r}: {err}") from None
    if seeds is not None and workloads is not None:
        raise ValueError(f"seeds and workloads={workloads} name the same bank: give one")
    if workloads is not None and (isinstance(workloads, bool) or not isinstance(workloads, int)
                                  or workloads < 1):
        raise ValueError(f"workloads={workloads!r} is invalid: allowed an integer >= 1")
    if seeds is None:
        seeds = range(TRAIN_SEED0, TRAIN_SEED0 + (workloads or MAKE_WORKLOADS))
    params = oenv.make_params(table, pod_table, seeds, tune=tune, subset=subset,
                              invalid_penalty=invalid_penalty, encoding=encoding,
                              power_weight=power_weight, frag_shaping=frag_shaping)
    return oenv.OpenBEnv(params, table.models), params


def trace_names(trace: str) -> tuple[str, ...]:
    """The pod files of `--pods`: one name or path, or several joined by commas (a bank
    that mixes them, `vte.openb.env.make_params`). ValueError on an empty one."""
    names = tuple(name.strip() for name in str(trace).split(","))
    if not all(names):
        raise ValueError(f"trace={trace!r} is invalid: allowed one pod file or several "
                         "joined by commas, none empty")
    return names


def load_traces(trace: str, nodes: str = "gpu"):
    """(NodeTable, [PodTable, ...]) of `--pods`' pod files (`trace_names`) on a node file."""
    names = trace_names(trace)
    return load_node_table(nodes), [load_trace(name, nodes)[1] for name in names]


def _subset(c: OpenBConfig, nodes) -> int | None:
    return c.subset if c.subset < len(nodes) else None


def run_params(config, train: bool):
    """The training bank of a run (sub-clusters of `--subset`); its evaluation replays
    the full cluster with `run_grid` instead (`evaluate`)."""
    c = config.env_config
    nodes, pods = load_traces(c.pods, c.nodes)
    params = oenv.make_params(nodes, pods, range(TRAIN_SEED0, TRAIN_SEED0 + c.workloads),
                              tune=c.tune, subset=_subset(c, nodes),
                              power_weight=tuple(c.power_weight),
                              frag_shaping=c.frag_shaping,
                              encoding=encoding_of_config(config))
    return oenv.OpenBEnv(params, nodes.models), params


def section(config) -> OpenBConfig:
    """A run's OpenB section: `config.env_config` of a trainer's configuration, or of a
    config.json dict (`vte.config.env_section`: old keys under their new names, onehot
    for a run saved before `encoding` existed)."""
    if isinstance(config, dict):
        from vte.config import env_section
        return env_section(config)
    return config.env_config


def encoding_of_config(config) -> str:
    """The observation encoding of a run (`env.ENCODINGS`), of a trainer's configuration
    or a config.json dict (onehot for a run saved before the field existed)."""
    return oenv.check_encoding(section(config).encoding)


def check_config(config) -> None:
    """The teacher is a published policy, the files load, the sub-clusters fit."""
    from vte.openb.trace import TRACES, TraceError
    c = config.env_config
    teacher = getattr(config, "teacher", None)
    if teacher is not None and teacher not in TEACHERS and not teacher.startswith(PLAN):
        raise flag_error("teacher", teacher, "one of " + ", ".join(TEACHERS) + ", or "
                         f"{PLAN}<base> (the lookahead planner over a published policy or an "
                         "OpenB run directory or zoo:NAME) with --env openb (the trace has no known "
                         "optimum)", depends=("env",))
    try:
        nodes = load_node_table(c.nodes)
    except (TraceError, OSError, ValueError) as err:
        raise flag_error("nodes", c.nodes, f"gpu, all or the path of a node file of the "
                         f"OpenB format ({err})") from None
    try:
        load_traces(c.pods, c.nodes)
    except (TraceError, OSError, ValueError) as err:
        raise flag_error("pods", c.pods, f"a bundled trace ({', '.join(TRACES)}) or "
                         "the path of a pod file of the OpenB format, or several joined by "
                         f"commas ({err})") from None
    from vte.openb.power import check_gpu_models
    try:
        check_gpu_models(nodes.models)      # the observation and the power model read the table
    except ValueError as err:
        raise flag_error("nodes", c.nodes, f"a node file whose GPU models the per-model "
                         f"table knows ({err})") from None
    plan = getattr(config, "plan", None)      # a planning teacher's settings (checked)
    rollouts = plan.rollouts if plan is not None else None
    if rollouts is not None and rollouts not in _published():
        try:
            problem = None if _is_run(rollouts) else "not one"
        except ValueError as err:            # DIR@STEP without STEP, zoo: an unknown name
            problem = str(err)
        if problem is not None:
            raise flag_error("plan_rollouts", rollouts, f"one of {', '.join(_published())}, "
                             "an OpenB run directory or zoo:NAME"
                             + ("" if problem == "not one" else f" ({problem})"),
                             depends=("teacher",))
    if teacher is not None and teacher.startswith(PLAN):
        try:
            teacher_action(teacher, config)
        except ValueError as err:
            raise flag_error("teacher", teacher, f"{PLAN}<base>, the base one of "
                             f"{', '.join(_published())}, an OpenB run directory or "
                             f"zoo:NAME trained on --nodes {c.nodes}'s GPU models ({err})") from None
    if c.subset > len(nodes):
        raise flag_error("subset", c.subset, f"1..{len(nodes)}, the node file's "
                         "nodes, with --env openb", depends=("env", "nodes"))
    low, high = c.power_weight
    if not 0.0 <= low <= high <= 1.0:
        raise flag_error("power_weight", c.power_weight, "two numbers LOW HIGH with "
                         "0 <= LOW <= HIGH <= 1 (each episode's power preference is drawn "
                         "uniformly between them)")


def network(hidden: int):
    from vte.openb.network import OpenBNet
    return OpenBNet(hidden=hidden)


def policies() -> dict:
    """The six published policies as actions of the environment, `(key, state, params) ->
    action` (`vte.openb.env.policy_action`), `preference_mix`, and `plan_fgd`: the lookahead
    planner over FGD at `python -m vte.openb`'s default settings (`lookahead.planner`; it
    draws its futures from the key, which must be a PRNG key). A trainer labels its
    environments in one vmapped call, so there the planner plans every decision (its
    `start` and fewer-than-two-nodes shortcuts apply only unbatched)."""
    from vte.openb.lab.lookahead import planner
    from vte.openb.policies import POLICIES
    return {**{name: oenv.policy_action(p) for name, p in POLICIES.items()},
            "preference_mix": preference_mix,
            "plan_fgd": oenv.policy_action(planner(POLICIES["fgd"]))}


def _is_run(name: str) -> bool:
    """A run directory, `DIR@STEP`, or a zoo name such as `zoo:openb-evidence`
    (`vte.checkpoint.split_step`, which resolves zoo names; a missing STEP or an unknown
    `zoo:` name raises)."""
    from vte.checkpoint import is_run_path
    return is_run_path(name)


def _published() -> tuple[str, ...]:
    from vte.openb.policies import POLICIES
    return tuple(POLICIES)


def learned_policy(run_dir: str, num_models):
    """The network an OpenB run directory trained, as a replay policy
    (`vte.openb.network.as_policy`, in the encoding its config.json records). `num_models`:
    the node file's GPU models by name (`NodeTable.models`: their per-model table gives the
    watts and the agnostic features), or their number (the bundled node files' table).
    Raises ValueError, naming the directory, when it is not a run, was trained on another
    environment, or (a one-hot network) on a node file of other GPU models."""
    from vte import checkpoint as ckpt
    from vte import registry
    from vte.openb.network import as_policy
    try:
        config = ckpt.load_config(run_dir)
    except (FileNotFoundError, ckpt.CheckpointError) as err:
        raise ValueError(str(err)) from None
    if registry.of_run(config) is not REGISTRATION:
        raise ValueError(f"{run_dir!r} trained on {registry.of_run(config).id}, "
                         "not on the OpenB trace (train with --env openb)")
    try:
        encoding = encoding_of_config(config)
        trained = _trained_models(config) if encoding == oenv.ONEHOT else None
        return as_policy(ckpt.network_from_config(config), ckpt.load_variables(run_dir),
                         num_models, encoding=encoding, trained_models=trained)
    except (ValueError, FileNotFoundError) as err:
        raise ValueError(f"{run_dir!r}: {err}") from None


def _trained_models(config: dict):
    """The GPU models of the node file a run trained on (None when it no longer loads)."""
    try:
        return load_node_table(section(config).nodes).models
    except Exception:            # a node file moved away: the width check still applies
        return None


def plans(teacher: str | None) -> bool:
    """Whether the teacher is the lookahead planner (`plan_fgd`, `plan:<base>`), the one
    that takes the `--plan-*` settings (`lookahead.PlanSettings`)."""
    return teacher is not None and (teacher == "plan_fgd" or teacher.startswith(PLAN))


def teacher_action(name: str, config):
    """The action of a teacher built from the run's configuration, `(key, state, params)
    -> action`, or None for a teacher that is one of `policies()` as it stands: `plan_fgd`
    and `plan:<base>`, the lookahead planner (`lookahead.planner`, with the run's `plan`)
    over FGD or over `base`, a published policy or an OpenB run directory, whose network is
    loaded once and held fixed (expert iteration: the planner over the last round's
    network labels the next round), with the run's planner settings `config.plan` (a
    `lookahead.PlanSettings`; its `rollouts` a published policy or a run directory, as
    `base`). With
    `config.plan_costs` the teacher gives `(action, cost)`, every action's cost its regret
    in GPUs (`env.regret_action`, marked `gives_costs`), for the trainer's distillation.
    ValueError when `base` is neither (a run directory may be `DIR@STEP`, one checkpoint)."""
    from vte.openb.lab.lookahead import planner, planner_regrets
    from vte.openb.policies import POLICIES
    if name == "plan_fgd":
        base = "fgd"
    elif name.startswith(PLAN):
        base = name[len(PLAN):]
    else:
        return None
    def resolve(base):
        if base in POLICIES:
            return POLICIES[base]
        if _is_run(base):
            return learned_policy(base, load_node_table(config.env_config.nodes).models)
        raise ValueError(f"{base!r} is neither a published policy, a directory nor a "
                         "scheduler of the zoo (zoo:NAME, vte.zoo.names())")
    policy = resolve(base)
    from vte.openb.lab.lookahead import PlanSettings
    plan = getattr(config, "plan", None) or PlanSettings()
    settings = plan.kwargs(None if plan.rollouts is None else resolve(plan.rollouts))
    if getattr(config, "plan_costs", False):
        return oenv.regret_action(planner_regrets(policy, **settings))
    return oenv.policy_action(planner(policy, **settings))


def observed_policies() -> dict:
    """FGD read off the observation (`vte.openb.env.fgd_from_observation`): the same action
    as `policies()["fgd"]`, with the FGD the observation already computed."""
    return {"fgd": lambda key, obs, params: oenv.fgd_from_observation(obs)}


def preference_mix(key, state, params) -> jax.Array:
    """The PWR+FGD mix at the episode's power preference w as an action of the environment:
    the node of the best a x PWR + (1000 - a) x FGD score, a = `power.preference_weight(w)`
    (FGD at w = 0, PWR at w = 1; `power.mix_scores`)."""
    from vte.openb.power import mix_scores, preference_weight
    a = preference_weight(state.power_weight)

    def mix(k, st, pod, feasible, spec):
        return mix_scores(a, k, st, pod, feasible, spec, params.power)

    return oenv.policy_action(mix)(key, state, params)


def metrics(info: dict, done) -> dict:
    """Invalid actions, failed pods, and GPU allocation, fragmentation and failed pods at
    the end of ended episodes."""
    return {
        "invalid_rate": info["invalid_action"].mean(),
        "failed_rate": info["failed"].mean(),
        "alloc_end_sum": jnp.sum(jnp.where(done, info["alloc_percent"], 0.0)),
        "frag_end_sum": jnp.sum(jnp.where(done, info["frag_percent"], 0.0)),
        "failed_sum": jnp.sum(jnp.where(done, info["failed_pods"], 0)).astype(jnp.float32),
        "episodes": jnp.sum(done),
    }


CURVES = (("alloc_end", "GPU allocation at episode end (% of the sub-cluster's GPUs)", "alloc"),
          ("failed", "failed pods per episode", "failed"))


def train_reward(state, reward, params):
    """The reward in % of the episode's GPUs (`state` is the one the decision was taken in,
    before any auto-reset)."""
    from vte.openb.trace import MILLI
    return reward * (100.0 * MILLI) / jnp.maximum(state.cluster.total_gpu_milli, 1)


def init_check(source: dict, config) -> str | None:
    """Why a run's network cannot seed this one: it was trained with another observation
    encoding, or (one-hot) its node file has another number of GPU models (the width of the
    network's model one-hot); None when it can."""
    mine, its = encoding_of_config(config), encoding_of_config(source)
    if mine != its:
        return (f"trained with --encoding {its}, this run asks for --encoding {mine}: the "
                "network's input differs")
    if mine == oenv.AGNOSTIC:
        return None
    theirs, mine_nodes = section(source).nodes, config.env_config.nodes
    a, b = (max(len(load_node_table(f).models), 1) for f in (theirs, mine_nodes))
    if a != b:
        return (f"trained on --nodes {theirs} ({a} GPU models), this run asks for --nodes "
                f"{mine_nodes} ({b}): the network's input width differs")
    return None


def load_policy(config: dict, variables, greedy: bool = True):
    """A trained network as a policy of the replay, `(key, state, pod, feasible, spec) ->
    (scores, shared_gpu)` (`vte.openb.network.as_policy`); `greedy` does not apply (the
    replay keeps the best-scored feasible node)."""
    from vte.openb.network import as_policy, models_of
    encoding = encoding_of_config(config)
    if encoding == oenv.AGNOSTIC:
        return as_policy(network(config["hidden"]), variables,
                         load_node_table(section(config).nodes).models,
                         encoding=encoding)
    return as_policy(network(config["hidden"]), variables, models_of(variables),
                     encoding=encoding)


def as_action(policy):
    """A policy of the replay (a published one, a loaded run) as an action of the
    environment, `(key, state, params) -> action` (`vte.openb.env.policy_action`)."""
    return oenv.policy_action(policy)


def run_make(config: dict) -> dict:
    """The `make` keywords of a run's evaluation: its trace and node file, the published
    seeds, on the full cluster."""
    c = section(config)
    return {"pods": trace_names(c.pods)[0], "nodes": c.nodes, "tune": c.tune,
            "seeds": (EVAL_SEED0,)}


def evaluate(config, params, out: str) -> dict:
    """Each trained seed's network and the six published policies replayed on the held-out
    published seeds, full cluster; writes `eval.json` (the `run_grid` result) and prints
    the table beside the published figures."""
    from vte.openb.lab.experiment import format_table, run_grid
    from vte.openb.network import as_policy
    from vte.openb.policies import POLICIES

    c = config.env_config
    nodes, tables = load_traces(c.pods, c.nodes)
    net = network(config.hidden)
    named = dict(POLICIES)
    for s in range(config.seeds):
        variables = {"params": jax.tree_util.tree_map(lambda x: x[s], params["params"])}
        name = "learned" if s == 0 else f"learned_seed{s}"
        named[name] = as_policy(net, variables, nodes.models,
                                encoding=encoding_of_config(config))
    episodes = config.eval_episodes if config.eval_episodes is not None else EVAL_EPISODES
    results = []
    for i, (trace, pods) in enumerate(zip(trace_names(c.pods), tables)):
        result = run_grid(nodes, pods, named, range(EVAL_SEED0, EVAL_SEED0 + episodes),
                          tune=c.tune, progress=True)
        atomic_write_text(os.path.join(out, eval_file(trace, i)), json.dumps(result, indent=1))
        print(format_table(result))
        results.append(result)
    return results[0]


def eval_file(trace: str, index: int) -> str:
    """The evaluation file of a run's `index`-th trace: `eval.json` for the first, then
    `eval_<name>.json` (a path's file name without `.csv`)."""
    if index == 0:
        return "eval.json"
    return f"eval_{os.path.splitext(os.path.basename(trace))[0]}.json"


def render(state, params, action=None, reference=None, caption=None):
    """The GPU-sharing cluster of one (unbatched) state with the pod to place
    (`vte.openb.viewer.render_cluster`)."""
    from vte.openb.viewer import render_cluster
    return render_cluster(state.cluster, state.nodes, oenv.current_pod(state, params),
                          action=action, reference=reference, caption=caption)


def _planner():
    from vte.openb.lab.lookahead import PlanSettings
    return PlanSettings


REGISTRATION = Registration(
    id="OpenB-v0", flag="openb",
    summary="the OpenB trace replay (Alibaba GPU cluster, the FGD paper's experiment)",
    make=make, config=OpenBConfig, renamed=RENAMED, check_config=check_config, run_params=run_params,
    network=network, policies=policies, observed_policies=observed_policies,
    default_policy="fgd", teachers=TEACHERS, default_teacher="fgd",
    teacher_action=teacher_action, planner=_planner(), plans=plans,
    metrics=metrics, curves=CURVES, evaluate=evaluate, load_policy=load_policy,
    as_action=as_action, run_make=run_make, train_reward=train_reward, render=render,
    protocols={"kube-extender": "vte.openb.kube.cli:main"}, init_check=init_check,
    evaluate_main="vte.openb.__main__", evaluate_module="vte.openb.lab.experiment",
    eval_episodes=EVAL_EPISODES,
    small={"subset": 4, "seeds": (1, 2)},
    defaults={"pods": "default", "nodes": "gpu", "workloads": 256, "tune": 1.3,
              "power_weight": (0.0, 0.0), "frag_shaping": 0.0,
              "encoding": SAVED_BEFORE_ENCODING})
