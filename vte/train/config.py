"""A training run described by one frozen, typed configuration.

    config = PPOConfig(num_envs=4096)                 # research code
    config = PPOConfig.from_args(["--num-envs", "4096"])   # the command line (the same)
    init, update = ppo.make_update(config)

Each field carries its default, its help, the range it allows and its group on the
command line (`flag`); `command_line(cls)` turns the fields into `argparse` flags
(`num_envs` -> `--num-envs`, booleans get `--no-...`), and `__post_init__` checks every
value in one place, raising ValueError that names the flag, the bad value and what is
allowed. `to_dict` is the run's `config.json` (the layout `vte.load_policy` reads);
`from_dict` reads it back.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from vte import registry
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
PLAN_FIELDS = ("plan_candidates", "plan_futures", "plan_horizon")   # a planning teacher's
# The settings every planning teacher used before the --plan-* flags existed: a run saved
# then loads with these, whatever the planner's defaults become.
PLAN_BEFORE_FLAGS = {"plan_candidates": 4, "plan_futures": 8, "plan_horizon": 8}
# Fields that runs saved before they existed lack, with the value those runs used (the
# environments' own flags: their registrations' `defaults`).
ADDED_LATER = {"env": "synthetic", "teacher": "optimal", "distill_temp": 0.0,
               "distill_coef": 1.0, "samples_per_state": 1, "all_actions": False,
               "critic_warmup": 0, "online": False, "plan_candidates": None,
               "plan_futures": None, "plan_horizon": None, "plan_costs": False,
               "plan_pods_first": False, "plan_rollouts": None, "plan_confidence": 0.0,
               "plan_pod_value": 0.0, "keep_checkpoints": 3, "spread_starts": False,
               "tensorboard": False}
for _env in ENVS:
    ADDED_LATER.update(registry.registration(_env).defaults)
# Fields stored under "env" in config.json (the layout every saved run has): the name and
# every registered environment's own flags.
ENV_KEYS = {"env": "name", **{k: k for env in ENVS for k in registry.registration(env).config_keys}}


def flag(default, help: str, *, low=None, high=None, group: str = "training",
         choices: tuple | None = None, metavar: str | None = None):
    """A configuration field: its default, help and allowed values (`low` <= v <= `high`,
    or one of `choices`); `group` is its section of `--help`."""
    return field(default=default, metadata={"help": help, "low": low, "high": high,
                                            "group": group, "choices": choices,
                                            "metavar": metavar})


def minibatches_of(batch: int, size: int) -> int:
    """How many minibatches split `batch` decisions into minibatches of about `size`:
    `batch // size` when it divides the batch, else the largest divisor of `batch` below
    it (at least 1), so that every minibatch holds the same number of decisions."""
    n = max(1, batch // size)
    while batch % n:
        n -= 1
    return n


def _flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


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
    lr: float = flag(3e-3, "Adam learning rate", low=0.0)
    anneal_lr: bool = flag(True, "decay the learning rate linearly to 0")
    max_grad_norm: float = flag(1.0, "clip gradients to this global norm", low=0.0)
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
                    f"{e}: {registry.registration(e).summary}" for e in ENVS),
                    group="environment", choices=ENVS)
    num_nodes: int = flag(64, "nodes per cluster (openb: nodes of each training sub-cluster)",
                          low=1, group="environment")
    queue_len: int = flag(8, "queue slots (synthetic)", low=1, group="environment")
    episode_len: int = flag(128, "decisions per episode (synthetic)", low=1,
                            group="environment")
    weights: tuple[float, float, float] = flag(
        (1.0, 1.0, 1.0), "objective weights (performance, energy, reliability); the "
        "evaluation uses them, training too unless --sample-weights (synthetic)",
        group="environment", metavar=("PERF", "ENERGY", "REL"))
    sample_weights: bool = flag(True, "train on objective weights drawn per episode (shown to "
                                "the policy), so one model serves many preferences (synthetic)",
                                group="environment")
    trace: str = flag("default", "OpenB pod file: a bundled name (default, gpushare100, "
                      "gpuspec33, ... the seventeen traces) or a CSV path; several joined by "
                      "commas train one network on workloads of each (openb)",
                      group="environment")
    nodes: str = flag("gpu", "OpenB node file: gpu (the paper's 1213 GPU nodes), all (with the "
                      "CPU-only nodes) or a CSV path (openb)", group="environment")
    workloads: int = flag(256, "training workloads of the bank, one per seed 10000..10000+W-1 "
                          "and trace (openb; the evaluation replays the published seeds "
                          "42, 43, ...)",
                          low=1, group="environment")
    tune: float = flag(1.3, "workload GPU demand / cluster GPUs (openb)", low=0.0,
                       group="environment")
    power_weight: tuple[float, float] = flag(
        (0.0, 0.0), "power preference range: each episode draws its weight w of the kW a "
        "decision adds against its GPUs uniformly in [LOW, HIGH], 0 <= LOW <= HIGH <= 1, "
        "shown to the policy (openb; 0 0: GPUs only)", group="environment",
        metavar=("LOW", "HIGH"))
    frag_shaping: float = flag(0.0, "reward shaping: GPUs of reward per GPU of fragmentation "
                               "a placement removes (FGD's gain at the chosen node; negative "
                               "where it adds some), so each decision is credited with what "
                               "it leaves for later pods (openb; 0: none)", low=0.0,
                               group="environment")
    encoding: str = flag("agnostic", "how a node's GPU model enters the observation "
                         "(openb): agnostic, whether the pod may use its GPUs and their memory "
                         "and watts from the per-model table (vte.openb.power.GPU_MODELS), so "
                         "the network runs on clusters of other GPU models; onehot, a one-hot "
                         "of the node file's models (runs saved before this flag)",
                         group="environment", choices=("agnostic", "onehot"))
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
            self._check_field(f)
        # A list (from JSON or a caller) becomes the tuple the field is, so the frozen
        # config stays hashable and compares equal to its round trip.
        for name in ("weights", "power_weight"):
            object.__setattr__(self, name, tuple(float(w) for w in getattr(self, name)))
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

    def _check_field(self, f: dataclasses.Field) -> None:
        v, meta = getattr(self, f.name), f.metadata
        kind = _base_type(f.type)
        if v is None and f.default is None:
            return
        if kind is bool:
            ok = isinstance(v, bool)
            allowed = "True or False"
        elif kind is int:
            ok = isinstance(v, int) and not isinstance(v, bool)
            allowed = "an integer"
        elif kind is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            allowed = "a finite number"
        elif kind is tuple:
            ok = (isinstance(v, (tuple, list)) and len(v) == len(f.default)
                  and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                          and math.isfinite(x) for x in v))
            allowed = f"{len(f.default)} finite numbers"
        else:
            ok = isinstance(v, str)
            allowed = "a string"
        lo, hi, choices = meta.get("low"), meta.get("high"), meta.get("choices")
        if ok and choices is not None:
            ok, allowed = v in choices, "one of " + ", ".join(choices)
        if ok and lo is not None and hi is not None:
            ok = lo <= v <= hi
            allowed = ("an integer in [0, 2**32)" if f.name == "seed"
                       else f"a number in [{lo}, {hi}]")
        elif ok and lo is not None:
            strict = kind is float and lo == 0.0 and f.name in ("lr", "max_grad_norm", "tune")
            ok = v > lo if strict else v >= lo
            word = "an integer" if kind is int else "a finite number"
            allowed = f"{word} {'>' if strict else '>='} {lo}"
        if not ok:
            raise invalid(f.name, v, allowed)

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
        """The run's `config.json`: every field, the environment's under "env"."""
        out: dict[str, Any] = {"algorithm": self.algorithm, "num_updates": self.num_updates,
                               "env": {}}
        for f in fields(self):
            v = getattr(self, f.name)
            v = list(v) if isinstance(v, tuple) else v
            if f.name in ENV_KEYS:
                out["env"][ENV_KEYS[f.name]] = v
            else:
                out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, config: dict) -> "TrainConfig":
        """The configuration of a `config.json`; KeyError naming what it lacks. Runs saved
        before the OpenB environment existed are synthetic ones."""
        env = dict(config.get("env", {}))
        env.setdefault("name", "synthetic")
        kwargs, missing = {}, []
        for f in fields(cls):
            inside = f.name in ENV_KEYS
            source, key = (env, ENV_KEYS[f.name]) if inside else (config, f.name)
            if key in source:
                v = source[key]
                kwargs[f.name] = tuple(v) if isinstance(f.default, tuple) else v
            elif f.name in ADDED_LATER:
                kwargs[f.name] = ADDED_LATER[f.name]
            else:
                missing.append(f"env.{key}" if inside else key)
        if missing:
            raise KeyError(", ".join(sorted(missing)))
        if "plan_candidates" in kwargs and "plan_candidates" not in config:
            reg = registry.registration(env["name"])
            probe = argparse.Namespace(teacher=kwargs.get("teacher"))
            if reg.plan_settings is not None and reg.plan_settings(probe) is not None:
                kwargs.update(PLAN_BEFORE_FLAGS)     # a planning run saved before the flags
        return cls(**kwargs)

    # ------------------------------------------------------------------ command line

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> dict[str, Any]:
        """One flag per field, in its group; returns the groups by name."""
        groups = {g: parser.add_argument_group(g) for g in GROUPS}
        for f in fields(cls):
            meta, kind = f.metadata, _base_type(f.type)
            opts: dict[str, Any] = {"default": f.default, "help": meta["help"],
                                    "dest": f.name}
            if kind is bool:
                opts["action"] = argparse.BooleanOptionalAction
            elif kind is tuple:
                opts.update(type=float, nargs=len(f.default), default=list(f.default))
            elif kind in (int, float):
                opts["type"] = kind
            if meta.get("choices"):
                opts["choices"] = meta["choices"]
            if meta.get("metavar"):
                opts["metavar"] = meta["metavar"]
            groups[meta["group"]].add_argument(_flag_name(f.name), **opts)
        return groups

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> "TrainConfig":
        values = {f.name: getattr(args, f.name) for f in fields(cls)}
        values["weights"] = tuple(values["weights"])
        values["power_weight"] = tuple(values["power_weight"])
        return cls(**values)

    @classmethod
    def from_args(cls, argv: list[str]) -> "TrainConfig":
        """The configuration a command line (of config flags only) describes."""
        parser = argparse.ArgumentParser(allow_abbrev=False)
        cls.add_flags(parser)
        return cls.from_namespace(parser.parse_args(argv))


def _base_type(annotation) -> type:
    """int, float, bool, str or tuple of a field's annotation (a string here, given the
    module's `from __future__ import annotations`)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    for name, kind in (("tuple", tuple), ("bool", bool), ("int", int), ("float", float)):
        if text.startswith(name):
            return kind
    return str


@dataclass(frozen=True)
class PPOConfig(TrainConfig):
    """PPO (`train/ppo.py`)."""

    algorithm: ClassVar[str] = "ppo"

    total_timesteps: int = flag(2_400_000, TrainConfig.__dataclass_fields__[
        "total_timesteps"].metadata["help"], low=1)
    lr: float = flag(1e-3, "Adam learning rate", low=0.0)
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
    plan_candidates: int | None = flag(
        None, "a planning teacher (--teacher plan_fgd or plan:<base>): the base policy's best "
        "nodes compared at each decision, 1..64; default: the planner's own (python -m "
        "vte.openb's --plan-candidates)", low=1, group="algorithm")
    plan_futures: int | None = flag(
        None, "a planning teacher: sampled futures per candidate, 1..256; default: the "
        "planner's own", low=1, group="algorithm")
    plan_horizon: int | None = flag(
        None, "a planning teacher: pods per future, 1..4096; default: the planner's own",
        low=1, group="algorithm")
    plan_pods_first: bool = flag(
        False, "a planning teacher: between candidates that allocate as much, the one whose "
        "futures bind more pods (fail fewer, CPU-only pods too) first, then less "
        "fragmentation (python -m vte.openb's --plan-pods-first)", group="algorithm")
    plan_rollouts: str | None = flag(
        None, "a planning teacher: the policy that places the futures' pods, a published "
        "policy or an OpenB run directory; default: the base itself, which still ranks the "
        "candidates (python -m vte.openb's --plan-rollouts)", group="algorithm")
    plan_confidence: float = flag(
        0.0, "a planning teacher: z > 0 leaves the base's best node only for a candidate "
        "whose gain over it, paired future by future, is above z standard errors; 0: the "
        "lexicographic choice (python -m vte.openb's --plan-confidence)", low=0.0, high=10.0,
        group="algorithm")
    plan_pod_value: float = flag(
        0.0, "a planning teacher choosing by evidence: milli-GPU each pod bound at the horizon "
        "is worth beside the GPUs in the gain (CPU-only pods too); 0: pods count through "
        "their GPUs only (python -m vte.openb's --plan-pod-value)", low=0.0, high=1e5,
        group="algorithm")
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
        if self.teacher is None:
            object.__setattr__(self, "teacher", self.registration.default_teacher
                               if self.env in ENVS else None)
        super().__post_init__()
        reg = self.registration
        settings = reg.plan_settings(self) if reg.plan_settings is not None else None
        for name in PLAN_FIELDS:
            if settings is not None:         # config.json records the settings used
                object.__setattr__(self, name, settings[name[len("plan_"):]])
            elif getattr(self, name) is not None:
                raise invalid(name, getattr(self, name), "no value (the planner's own) unless "
                              "the teacher plans (--env openb --teacher plan_fgd or "
                              "plan:<base>)", depends=("teacher",))
        if self.plan_pods_first and settings is None:
            raise invalid("plan_pods_first", True, "False unless the teacher plans (--env "
                          "openb --teacher plan_fgd or plan:<base>)", depends=("teacher",))
        for name, unset in (("plan_rollouts", None), ("plan_confidence", 0.0),
                            ("plan_pod_value", 0.0)):
            if getattr(self, name) != unset and settings is None:
                raise invalid(name, getattr(self, name), f"{unset} unless the teacher plans "
                              "(--env openb --teacher plan_fgd or plan:<base>)",
                              depends=("teacher",))
        if settings is not None:
            from vte.openb.lab.lookahead import check_confidence, check_pod_value   # its own rules
            try:
                check_confidence(self.plan_confidence, self.plan_futures, self.plan_pods_first)
            except ValueError:
                raise invalid("plan_confidence", self.plan_confidence, "0 with --plan-pods-first "
                              "or --plan-futures 1 (the evidence needs a standard deviation "
                              "over two futures at least)",
                              depends=("plan_pods_first", "plan_futures")) from None
            try:
                check_pod_value(self.plan_pod_value, self.plan_confidence)
            except ValueError:
                raise invalid("plan_pod_value", self.plan_pod_value, "0 unless the teacher "
                              "chooses by evidence (--plan-confidence above 0)",
                              depends=("plan_confidence",)) from None
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
