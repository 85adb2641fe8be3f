"""A training run described by one frozen, typed configuration.

    config = PPOConfig(num_envs=4096)                 # research code
    config = PPOConfig.from_args(["--num-envs", "4096"])   # the command line (the same)
    config = PPOConfig.of(num_envs=4096, num_nodes=16)     # flat names, the flags'
    init, update = ppo.make_update(config)

Three kinds of fields: the general ones (`TrainConfig`), the algorithm's own (`PPOConfig`,
`ImitateConfig`), and the environment's own, a section its registration declares
(`env_config`: `Registration.config`, e.g. `ClusterConfig`, whose names are its
`vte.make` keywords); imitation's planning teacher adds the planner's settings (`plan`:
`Registration.planner`). Each field carries its default, its help, the range it allows
and its group on the command line (`vte.config.option`); `add_flags` turns the fields into
`argparse` flags (`num_envs` -> `--num-envs`, booleans get `--no-...`), and
`__post_init__` checks every value in one place, raising ValueError that names the flag,
the bad value and what is allowed. `to_dict` is the run's `config.json` (the layout
`vte.load_policy` reads); `from_dict` reads it back, old layouts and names included.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from vte import registry
from vte.config import NOT_GIVEN, add_flags as _add_flags
from vte.config import check_field, env_section, from_json, given, option, read_renamed, to_json
from vte.rng import SEED_LIMIT

GROUPS = ("training", "algorithm", "environment", "outputs")
ENVS = registry.flags()          # the --env names of the registered environments
# Both trainers' default minibatch, in decisions (`num_minibatches` None): on the CPU, a
# gradient step of 128 decisions costs little less than one of 512, so smaller minibatches
# give more steps in the same time and learn more from each decision (PPO: 2.4M steps do
# what 6M did with minibatches of 512; imitation: 6M what 8M did; docs/history.md,
# "Minibatches of 128 decisions").
MINIBATCH = 128
MIN_DISTILL_TEMP = 1e-6   # cost units; below it the teacher's softmax is a float32 argmax
# The settings every planning teacher used before the --plan-* flags existed: a run saved
# then loads with these, whatever the planner's defaults become.
PLAN_BEFORE_FLAGS = {"candidates": 4, "futures": 8, "horizon": 8}
# Fields that runs saved before they existed lack, with the value those runs used (an
# environment's own fields: its registration's `defaults`).
ADDED_LATER = {"env": "synthetic", "teacher": "optimal", "distill_temp": 0.0,
               "distill_coef": 1.0, "samples_per_state": 1, "all_actions": False,
               "critic_warmup": 0, "online": False, "plan_costs": False,
               "keep_checkpoints": 3, "spread_starts": False, "tensorboard": False}
SECTIONS = ("env_config", "plan")   # fields that are sections, not flags
flag = option                        # a configuration field (`vte.config.option`)


def minibatches_of(batch: int, size: int) -> int:
    """How many minibatches split `batch` decisions into minibatches of about `size`:
    `batch // size` when it divides the batch, else the largest divisor of `batch` below
    it (at least 1), so that every minibatch holds the same number of decisions."""
    n = max(1, batch // size)
    while batch % n:
        n -= 1
    return n


invalid = registry.flag_error   # the one error of a bad flag: names it, its value, what is allowed


@dataclass(frozen=True)
class TrainConfig:
    """What the two trainers share. Subclasses set `algorithm`, add their own fields and
    change defaults."""

    algorithm: ClassVar[str] = ""

    # training
    num_envs: int = flag(1024, "environments stepped in parallel (per seed)", low=1)
    num_steps: int = flag(4, "rollout length: steps per environment per update", low=1)
    total_timesteps: int = flag(1_000_000, "environment steps per seed; updates = this // "
                                "(num_envs * num_steps)", low=1)
    update_epochs: int = flag(2, "passes over each rollout", low=1)
    num_minibatches: int | None = flag(
        None, "minibatches per epoch; must divide num_envs * num_steps; default: minibatches "
        f"of {MINIBATCH} decisions (num_envs * num_steps / {MINIBATCH}, or the largest divisor "
        "of it below that)", low=1)
    lr: float = flag(3e-3, "Adam learning rate", low=0.0, strict=True)
    anneal_lr: bool = flag(True, "decay the learning rate linearly to 0")
    max_grad_norm: float = flag(1.0, "clip gradients to this global norm", low=0.0,
                                strict=True)
    seed: int = flag(0, "random seed", low=0, high=SEED_LIMIT - 1)
    seeds: int = flag(1, "independent models trained at once (vmap over seeds)", low=1)
    hidden: int = flag(32, "network width", low=1)
    init_from: str | None = flag(None, "start from the latest checkpoint of another run (e.g. "
                                 "imitation), or from checkpoint STEP with DIR@STEP: its seed-0 "
                                 "network, which every --seeds model starts from", metavar="DIR")
    spread_starts: bool = flag(False, "before the first update, play each environment a "
                               "uniformly drawn number of steps (0 to the episode's step limit "
                               "- 1) with the starting network, so that the first rollouts "
                               "cover every phase of an episode rather than its first steps "
                               "(short runs, e.g. a round of expert iteration from --init-from)")
    # environment
    env: str = flag("synthetic", "the environment (vte.registered()): " + "; ".join(
                    f"{e}: {registry.registration(e).summary}" for e in ENVS) + "; its own "
                    "flags follow, each group under its --env",
                    group="environment", choices=ENVS + registry.registered())
    env_config: Any = flag(None, "the environment's own settings: an instance of its "
                           "registration's `config` section (e.g. vte.cluster.registration."
                           "ClusterConfig), or None for its defaults", group="section")
    # outputs
    log_every: int = flag(5, "updates per compiled chunk: metrics and progress bar refresh",
                          low=1, group="outputs")
    checkpoint_every: int = flag(50, "updates between checkpoints (rounded up to a multiple "
                                 "of --log-every); one is always written at the end", low=1,
                                 group="outputs")
    keep_checkpoints: int = flag(3, "checkpoints kept on disk, the newest ones (0: every one, "
                                 "e.g. to choose one afterwards on other seeds, as DIR@STEP)",
                                 low=0, group="outputs")
    tensorboard: bool = flag(False, "also write every scalar of metrics.jsonl as TensorBoard "
                             "event files in OUT/tensorboard/seed_S (one run per seed; "
                             "train/..., losses/..., charts/SPS, eval/... at the end; x: env "
                             "steps): tensorboard --logdir OUT/tensorboard; needs "
                             "pip install -e \".[tensorboard]\"", group="outputs")
    eval_episodes: int | None = flag(None, "held-out episodes for eval.json (0: skip the "
                                     "evaluation); default 64 synthetic episodes, or 10 "
                                     "held-out workloads on the full cluster with --env openb",
                                     low=0, group="outputs")

    # ------------------------------------------------------------------ checks

    def __post_init__(self):
        for f in fields(self):
            if f.name not in SECTIONS:
                check_field(self, f)
        reg = registry.registration(self.env)          # an id ("OpenB-v0") is the same env
        object.__setattr__(self, "env", reg.flag)
        section = reg.config
        if self.env_config is None:
            object.__setattr__(self, "env_config", section())
        elif isinstance(self.env_config, dict):          # a config.json's env section
            object.__setattr__(self, "env_config", from_json(section, self.env_config))
        elif not isinstance(self.env_config, section):
            raise invalid("env_config", type(self.env_config).__name__,
                          f"a {section.__module__}.{section.__name__} (--env {reg.flag}'s "
                          "section) or None", depends=("env",))
        batch = self.num_envs * self.num_steps
        if self.num_minibatches is None:
            object.__setattr__(self, "num_minibatches",
                               minibatches_of(batch, MINIBATCH))
        if self.total_timesteps < batch:
            raise invalid("total_timesteps", self.total_timesteps,
                           f"at least num_envs * num_steps = {batch} (one update)",
                           depends=("num_envs", "num_steps"))
        if batch % self.num_minibatches:
            raise invalid("num_minibatches", self.num_minibatches,
                           f"a divisor of num_envs * num_steps = {self.num_envs} * "
                           f"{self.num_steps} = {batch}", depends=("num_envs", "num_steps"))
        self.registration.check_config(self)

    @property
    def registration(self) -> registry.Registration:
        """The registration of the environment the run trains on (`--env`)."""
        return registry.registration(self.env)

    @classmethod
    def of(cls, **values) -> "TrainConfig":
        """A configuration from flat keywords, the flags' names (`PPOConfig.of(num_envs=64,
        num_nodes=8)`): the environment's fields go to its section (`env_config`), a
        planning teacher's `plan_*` to `plan`. Unknown names raise ValueError naming them."""
        own = {f.name for f in fields(cls) if f.name not in SECTIONS}
        reg = registry.registration(values.get("env", "synthetic"))
        section = {f.name for f in fields(reg.config)}
        planner = reg.planner
        plan = ({f.name for f in fields(planner)}
                if planner is not None and "plan" in cls.__dataclass_fields__ else set())
        kwargs, env_values, plan_values = {}, {}, {}
        for name, value in read_renamed(reg, values, lambda n: f"{n}=").items():
            if name in own:
                kwargs[name] = value
            elif name in section:
                env_values[name] = value
            elif name.startswith("plan_") and name[5:] in plan:
                plan_values[name[5:]] = value
            else:
                raise ValueError(f"{name!r} is not a field of {cls.__name__} with --env "
                                 f"{reg.flag}: allowed {sorted(own | section)}"
                                 + (f" and plan_{{{', '.join(sorted(plan))}}}" if plan else ""))
        kwargs["env_config"] = reg.config(**env_values)
        if plan_values:
            kwargs["plan"] = planner(**plan_values)
        return cls(**kwargs)

    # ------------------------------------------------------------------ derived

    @property
    def batch_size(self) -> int:
        """Environment steps per update and seed."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        """Decisions per gradient step: num_envs * num_steps / num_minibatches."""
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    # ------------------------------------------------------------------ config.json

    def to_dict(self) -> dict:
        """The run's `config.json`: the general and algorithm fields, the environment's
        section under "env" (with its "name"), a planning teacher's settings under "plan";
        only the fields that apply to the run."""
        out: dict[str, Any] = {"algorithm": self.algorithm, "num_updates": self.num_updates}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "env":
                continue
            if f.name == "env_config":
                out["env"] = {"name": self.env, **to_json(v)}
            elif f.name == "plan":
                if v is not None:
                    out["plan"] = to_json(v)
            else:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_dict(cls, config: dict) -> "TrainConfig":
        """The configuration of a `config.json`; KeyError naming what it lacks. Files of
        older versions load too: runs saved before the OpenB environment existed are
        synthetic ones, every environment's fields were stored in each run's "env"
        (the other environments' are dropped), renamed fields are read under their new
        names (`Registration.renamed`, with a note), fields added later take the value
        those runs used (`ADDED_LATER`, the registration's `defaults`)."""
        reg = registry.of_run(config)
        kwargs, missing = {}, []
        for f in fields(cls):
            if f.name in SECTIONS or f.name == "env":
                continue
            if f.name in config:
                v = config[f.name]
                kwargs[f.name] = tuple(v) if isinstance(f.default, tuple) else v
            elif f.name in ADDED_LATER:
                kwargs[f.name] = ADDED_LATER[f.name]
            else:
                missing.append(f.name)
        if missing:
            raise KeyError(", ".join(sorted(missing)))
        kwargs["env"] = reg.flag
        kwargs["env_config"] = env_section(config)
        if "plan" in cls.__dataclass_fields__:
            kwargs["plan"] = _saved_plan(config, reg, kwargs.get("teacher"))
        return cls(**kwargs)

    # ------------------------------------------------------------------ command line

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> dict[str, Any]:
        """One flag per field, in its group; each environment's section in a group of its
        own ("environment: --env NAME"), a planning teacher's settings in "planner";
        returns the groups by name."""
        groups = {g: parser.add_argument_group(g) for g in GROUPS}
        for group in GROUPS:
            _add_flags(cls, groups[group], fields=tuple(
                f.name for f in fields(cls) if f.metadata["group"] == group))
        seen = {f.name for f in fields(cls)}
        for env in ENVS:
            reg = registry.registration(env)
            names = tuple(f.name for f in fields(reg.config) if f.name not in seen)
            seen.update(names)
            _add_flags(reg.config, parser.add_argument_group(
                f"environment: --env {env} ({reg.config.__name__})"), given_only=True,
                fields=names)
            for old in reg.renamed:                  # old names still parse, with a note
                if old not in seen:
                    seen.add(old)
                    parser.add_argument(f"--{old.replace('_', '-')}", dest=old,
                                        default=NOT_GIVEN, help=argparse.SUPPRESS)
        if "plan" in cls.__dataclass_fields__:
            planners = {registry.registration(e).planner for e in ENVS} - {None}
            for planner in planners:
                _add_flags(planner, parser.add_argument_group(
                    f"planner: a planning teacher's settings ({planner.__name__})"),
                    prefix="plan_", given_only=True)
        return groups

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> "TrainConfig":
        """The configuration of parsed flags: the environment's own flags go to its
        section; an old name (`--trace`, `--num-nodes` with --env openb) is read under its
        new one with a note; another environment's flag raises a FlagError naming it."""
        values = {f.name: getattr(args, f.name) for f in fields(cls)
                  if f.name not in SECTIONS}
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
        reg = registry.registration(values["env"])
        own = {f.name for f in fields(reg.config)}
        env_values = given(reg.config, args)            # its own flags, then any other:
        for env in ENVS:                                 # another's, or an old name
            other = registry.registration(env)
            for name in [f.name for f in fields(other.config)] + list(other.renamed):
                if name not in env_values and hasattr(args, name):
                    v = getattr(args, name)
                    env_values[name] = tuple(v) if isinstance(v, list) else v
        env_values = read_renamed(reg, env_values)
        stray = sorted(set(env_values) - own)
        if stray:
            name = stray[0]
            owner = [e for e in ENVS if name in
                     {f.name for f in fields(registry.registration(e).config)}
                     | set(registry.registration(e).renamed)]
            raise invalid(name, env_values[name], f"no value with --env {reg.flag} (a flag of "
                          f"--env {'/'.join(owner)}; --env {reg.flag}'s own: "
                          + ", ".join(f"--{n.replace('_', '-')}" for n in sorted(own))
                          + ")", depends=("env",))
        values["env_config"] = reg.config(**env_values)
        if "plan" in cls.__dataclass_fields__:
            planner = reg.planner
            plan = {} if planner is None else given(planner, args, "plan_")
            for env in ENVS:
                other = registry.registration(env).planner
                if other is not None and other is not planner:
                    for name in given(other, args, "plan_"):
                        raise invalid("plan_" + name, getattr(args, "plan_" + name),
                                      f"no value with --env {reg.flag} (no planning teacher)",
                                      depends=("env",))
            plans = planner is not None and reg.plans(values.get("teacher")
                                                      or reg.default_teacher)
            if plan and not plans:
                name = sorted(plan)[0]
                raise invalid("plan_" + name, plan[name], "no value (the planner's own) unless "
                              "the teacher plans (--env openb --teacher plan_fgd or "
                              "plan:<base>)", depends=("teacher",))
            values["plan"] = planner(**plan) if plans else None
        return cls(**values)

    @classmethod
    def from_args(cls, argv: list[str]) -> "TrainConfig":
        """The configuration a command line (of config flags only) describes."""
        parser = argparse.ArgumentParser(allow_abbrev=False)
        cls.add_flags(parser)
        return cls.from_namespace(parser.parse_args(argv))


def _saved_plan(config: dict, reg, teacher):
    """A planning teacher's settings from a config.json: its "plan" section, or the flat
    `plan_*` keys of older files, or the settings of runs saved before the flags."""
    if reg.planner is None or not reg.plans(teacher or reg.default_teacher):
        return None
    if "plan" in config:
        return reg.planner(**config["plan"])
    names = {f.name for f in fields(reg.planner)}
    flat = {k[5:]: v for k, v in config.items()
            if k.startswith("plan_") and k[5:] in names and v is not None}
    if "plan_candidates" not in config:
        flat = {**PLAN_BEFORE_FLAGS, **flat}          # a planning run saved before the flags
    return reg.planner(**flat)


@dataclass(frozen=True)
class PPOConfig(TrainConfig):
    """PPO (`train/ppo.py`)."""

    algorithm: ClassVar[str] = "ppo"

    total_timesteps: int = flag(2_400_000, TrainConfig.__dataclass_fields__[
        "total_timesteps"].metadata["help"], low=1)
    lr: float = flag(1e-3, "Adam learning rate", low=0.0, strict=True)
    gamma: float = flag(0.0, "discount; 0 credits each decision with its own reward",
                        low=0.0, high=1.0, group="algorithm")
    gae_lambda: float = flag(0.95, "GAE lambda", low=0.0, high=1.0, group="algorithm")
    clip_eps: float = flag(0.2, "PPO clip range of the probability ratio (and of the value)",
                           low=1e-6, high=10.0, group="algorithm")
    ent_coef: float = flag(0.003, "entropy bonus", low=0.0, high=1e3, group="algorithm")
    vf_coef: float = flag(0.5, "value loss weight", low=0.0, high=1e3, group="algorithm")
    critic_warmup: int = flag(0, "first updates in which only the critic's own layers "
                              "(value_hidden, value) learn: the policy stays as it started "
                              "(e.g. --init-from an imitation run) while the critic learns "
                              "its returns, so the first policy steps get advantages from a "
                              "critic of this policy", low=0, group="algorithm")
    samples_per_state: int = flag(1, "actions sampled in each visited state and scored with "
                                  "the environment's reward function (vte.reward) without "
                                  "stepping; the policy gradient uses all of them, each "
                                  "against the mean of the others (needs --gamma 0; "
                                  "synthetic)", low=1,
                                  high=1024, group="algorithm")
    all_actions: bool | None = flag(None, "score every action of each visited state with "
                                    "the environment's reward function and take the "
                                    "policy gradient as its expectation under the "
                                    "behaviour policy, instead of from sampled actions "
                                    "(needs --gamma 0, --samples-per-state 1 and "
                                    "synthetic clusters; default: on wherever they hold)",
                                    group="algorithm")

    def __post_init__(self):
        super().__post_init__()
        scorable = self.registration.reward_fn is not None
        if self.all_actions is None:   # on wherever every action can be scored
            object.__setattr__(self, "all_actions", self.gamma == 0
                               and self.samples_per_state == 1 and scorable)
        if self.all_actions and self.samples_per_state > 1:
            raise invalid("samples_per_state", self.samples_per_state,
                          "1 with --all-actions (every action is already scored)",
                          depends=("all_actions",))
        if self.all_actions and self.gamma != 0:
            raise invalid("gamma", self.gamma, "0 with --all-actions (actions are scored "
                          "by their immediate reward, their whole return only at --gamma 0)",
                          depends=("all_actions",))
        if self.all_actions and not scorable:
            raise invalid("env", self.env, f"one of {_scorable()} with --all-actions (the "
                          f"reward of {self.env} needs a step)", depends=("all_actions",))
        if self.samples_per_state > 1 and self.gamma != 0:
            raise invalid("samples_per_state", self.samples_per_state,
                          f"1 with --gamma {self.gamma} (the extra actions are scored by "
                          "their immediate reward, which is their whole return only at "
                          "--gamma 0)", depends=("gamma",))
        if self.samples_per_state > 1 and not scorable:
            raise invalid("samples_per_state", self.samples_per_state,
                          f"1 with --env {self.env} (its reward needs a step)")


def _scorable() -> str:
    """The environments whose reward can be scored without a step."""
    return ", ".join(e for e in ENVS if registry.registration(e).reward_fn is not None)


@dataclass(frozen=True)
class ImitateConfig(TrainConfig):
    """Imitation (`train/imitate.py`)."""

    algorithm: ClassVar[str] = "imitate"

    total_timesteps: int = flag(10_000_000, TrainConfig.__dataclass_fields__[
        "total_timesteps"].metadata["help"], low=1)
    update_epochs: int = flag(1, TrainConfig.__dataclass_fields__[
        "update_epochs"].metadata["help"] + " (1 with --online)", low=1)
    vf_coef: float = flag(0.5, "value loss weight", low=0.0, high=1e3, group="algorithm")
    teacher: str | None = flag(None, "the labels: a reference policy of the environment ("
                               + "; ".join(f"{e}: {', '.join(registry.registration(e).teachers)}"
                                           for e in ENVS)
                               + "); default: the environment's own (" + "; ".join(
                                   f"{e}: {registry.registration(e).default_teacher}"
                                   for e in ENVS) + ")"
                               + "; openb also plan:<base>, the lookahead planner over a "
                               "published policy or an OpenB run directory (DIR@STEP for "
                               "one of its checkpoints; expert iteration); each environment "
                               "checks its own",
                               group="algorithm")
    plan: Any = flag(None, "a planning teacher's settings (--teacher plan_fgd or plan:<base>): "
                     "an instance of the registration's `planner` (OpenB: vte.openb.lab."
                     "lookahead.PlanSettings, the --plan-* flags), its defaults when None; "
                     "None when the teacher does not plan", group="section")
    plan_costs: bool = flag(
        False, "a planning teacher also gives each candidate node its regret: how far its "
        "futures end below the best candidate's in GPUs allocated less GPUs fragmented (mean "
        "over the futures; +inf on nodes it did not compare), distilled beside the label as "
        "--distill-temp says (in GPUs there)", group="algorithm")
    distill_temp: float = flag(0.02, "temperature of the distilled cost ranking: the loss "
                               "adds the cross-entropy to softmax(-cost / T) over the "
                               "feasible actions, so every node's cost teaches, not only the "
                               "optimum's (synthetic, and openb with --plan-costs; 0: the "
                               "label only)", low=0.0, high=1e3, group="algorithm")
    distill_coef: float = flag(1.0, "weight of the distillation term (--distill-temp)",
                               low=0.0, high=1e3, group="algorithm")

    online: bool = flag(True, "learn while collecting: the forward pass that chooses each "
                        "action is the one differentiated, so a decision costs one forward "
                        "and one backward pass, with no second pass and no shuffle; a "
                        "minibatch is a block of environments of one step (or whole steps, "
                        "its gradient accumulated) and the next block acts with the updated "
                        "network (one epoch; the minibatch size must divide num_envs or be a "
                        "multiple of it)", group="algorithm")

    def __post_init__(self):
        check_field(self, next(f for f in fields(self) if f.name == "env"))
        reg = registry.registration(self.env)
        if self.teacher is None:
            object.__setattr__(self, "teacher", reg.default_teacher)
        plans = (reg.plans is not None and isinstance(self.teacher, str)
                 and reg.plans(self.teacher))
        if plans and self.plan is None:
            object.__setattr__(self, "plan", reg.planner())
        elif plans and isinstance(self.plan, dict):
            object.__setattr__(self, "plan", reg.planner(**self.plan))
        elif plans and not isinstance(self.plan, reg.planner):
            raise invalid("plan", type(self.plan).__name__, f"a {reg.planner.__name__} or None",
                          depends=("teacher",))
        elif not plans and self.plan is not None:
            raise invalid("plan", self.plan, "None unless the teacher plans (--env openb "
                          "--teacher plan_fgd or plan:<base>)", depends=("teacher",))
        super().__post_init__()
        settings = self.plan
        if self.plan_costs and settings is None:
            raise invalid("plan_costs", True, "False unless the teacher plans (--env openb "
                          "--teacher plan_fgd or plan:<base>)", depends=("teacher",))
        if self.plan_costs and self.distill_temp == 0:
            raise invalid("plan_costs", True, "False with --distill-temp 0 (the regrets "
                          "would go unused)", depends=("distill_temp",))
        if 0.0 < self.distill_temp < MIN_DISTILL_TEMP:
            raise invalid("distill_temp", self.distill_temp,
                          f"0 (off) or a number in [{MIN_DISTILL_TEMP}, 1000.0]")
        if self.online:
            if self.update_epochs != 1:
                raise invalid("update_epochs", self.update_epochs,
                              "1 with --online (each decision is learned from once, as it "
                              "is collected)", depends=("online",))
            size = self.minibatch_size
            if self.num_envs % size and size % self.num_envs:
                raise invalid("num_minibatches", self.num_minibatches,
                              f"with --online, a count whose minibatch size (num_envs * "
                              f"num_steps / num_minibatches = {size}) divides num_envs = "
                              f"{self.num_envs} or is a multiple of it",
                              depends=("online", "num_envs", "num_steps"))


CONFIGS = {"ppo": PPOConfig, "imitate": ImitateConfig}


__all__ = ["TrainConfig", "PPOConfig", "ImitateConfig", "CONFIGS", "flag", "minibatches_of"]
