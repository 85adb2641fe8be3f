"""Write the card of a scheduler of the zoo from its result files, so that it cannot drift.

    python -m vte.zoo.card openb-evidence          # writes vte/zoo/openb-evidence/CARD.md
    python -m vte.zoo.card --all                   # every scheduler of the zoo
    python -m vte.zoo.card openb-evidence --check  # exit 1 if CARD.md differs from a rebuild

Every figure of a card is read here from a file: the scheduler's own folder (`config.json`,
its checkpoint, `eval.json`, `TRAINING.json` where it has them) and, for the OpenB network,
the replays and bounds kept in the repository's `benchmarks/results/` (so this command
runs in a checkout, not from an installed wheel). The prose around the figures is this
module's; a test rebuilds each card and compares it with the committed one.

The result files it reads (each card names its own too):

    benchmarks/results/openb_distilled_evidence/openb_*.json and summary.json
    benchmarks/results/openb_bound/*.json
    benchmarks/results/openb_power_evidence_top_*.json
    benchmarks/results/openb_evidence_chain/times.txt
    train/results/imitate_online10M_seed{0,1,2,3}_eval.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import types

from vte import zoo
from vte.files import atomic_write_text

REPO = os.path.dirname(os.path.dirname(zoo.ROOT))
RESULTS = os.path.join(REPO, "benchmarks", "results")
MACHINE = "a 2-core x86-64 CPU"


def _json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _result(*parts: str) -> str:
    path = os.path.join(RESULTS, *parts)
    if not glob.glob(path):
        raise FileNotFoundError(f"{path}: the result files of the card are not here (run "
                                "python -m vte.zoo.card in a checkout of the repository)")
    return path


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _network_facts(name: str) -> tuple[int, dict]:
    """(parameter count, network variables) of the zoo's scheduler (its shipped checkpoint)."""
    import numpy as np
    import jax
    from vte.checkpoint import load_variables
    variables = load_variables(zoo.path(name))
    count = sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(variables))
    return count, variables


# ----------------------------------------------------------------------------- OpenB


TRACE_FILES = ("openb_distilled_evidence", "openb_{trace}.json")
POWER_FILES = "openb_power_evidence_top_{trace}.json"
MARGINS = (4, 8, 12, 16)
# What loading a one-hot network for a node file of another number of GPU models raises
# (`vte.openb.network.as_policy`; tests/test_zoo.py checks the text against it).
REFUSAL = ("the network was trained on a node file with {models} GPU models; this one has "
           "K: use the node file it trained on, or a network of the agnostic encoding (such "
           "as the zoo's openb-agnostic)")
CHAIN = "train/openb_evidence_chain.sh"
WHY_FAILED = {     # measured by benchmarks/failed_pods.py, seeds 42..51 (docs/history.md)
    "cpu250": "On cpu250 it fails more CPU-only pods than FGD and fewer GPU ones.",
    "gpuspec25": "On gpuspec25 it fails fewer pods that ask for P100, G3 or V100 and more "
                 "that ask for T4 or no model.",
}


def _traces(folder: str = TRACE_FILES[0]) -> list[str]:
    """The traces of the figure files, in their grid's order (its summary.json)."""
    return list(_json(_result(folder, "summary.json"))["ordering"])


def _openb_rows(config: dict, folder: str = TRACE_FILES[0]) -> tuple[list[list[str]], dict]:
    """The seventeen traces' rows (network against FGD and the LP bound) and facts, from
    the replays in benchmarks/results/`folder`/."""
    rows, facts = [], {"ahead": 0, "more_failed": [], "closed": [], "jax": set(),
                       "device": set(), "gain_end": [], "gain_by_trace": {}}
    for trace in _traces(folder):
        run = _json(_result(folder, TRACE_FILES[1].format(trace=trace)))
        bound = _json(_result("openb_bound", f"{trace}.json"))["mean"]
        fgd = run["policies"]["fgd"]
        (net,) = [p for k, p in run["policies"].items() if k != "fgd"]
        facts["jax"].add(run["jax_version"])
        facts["device"].add(run["device"])
        facts["seeds"] = run["seeds"]
        facts["cluster"] = run["trace"]["num_nodes"], run["trace"]["num_gpus"]
        ends = (net["alloc_at_end"]["per_seed"], fgd["alloc_at_end"]["per_seed"])
        ahead = sum(a > b for a, b in zip(*ends))
        gain = net["alloc_at_end"]["mean"] - fgd["alloc_at_end"]["mean"]
        facts["gain_end"].append(gain)
        facts["gain_by_trace"][trace] = gain
        facts["ahead"] += gain > 0
        gap = bound["100"] - fgd["alloc_at_100"]["mean"]
        closed = (net["alloc_at_100"]["mean"] - fgd["alloc_at_100"]["mean"]) / gap * 100
        facts["closed"].append(closed)
        failed = net["failed_pods"]["mean"], fgd["failed_pods"]["mean"]
        if failed[0] > failed[1]:
            facts["more_failed"].append((trace, failed[0] - failed[1]))
        trained = " (trained on)" if trace in config["env"]["pods"].split(",") else ""
        rows.append([
            f"{trace}{trained}",
            f"**{net['alloc_at_100']['mean']:.2f}** / {fgd['alloc_at_100']['mean']:.2f} / "
            f"{bound['100']:.2f}",
            f"{closed:.0f} %",
            f"**{net['alloc_at_end']['mean']:.2f}** / {fgd['alloc_at_end']['mean']:.2f} / "
            f"{bound['end']:.2f}",
            f"{gain:+.2f} ({ahead} of {len(ends[0])})",
            f"{failed[0]:.1f} / {failed[1]:.1f}",
        ])
    return rows, facts


def _power_rows() -> tuple[list[list[str]], list[str], dict]:
    """The rows of the power table, their traces, and per margin the plateau savings on the
    traces where it keeps FGD's GRAR on every seed."""
    rows, traces, kept = [], [], {m: [] for m in MARGINS}
    for trace in _traces():
        path = os.path.join(RESULTS, POWER_FILES.format(trace=trace))
        if not os.path.isfile(path):
            continue
        traces.append(trace)
        policies = _json(path)["policies"]
        fgd = policies["fgd"]
        row = [trace, f"{fgd['grar']:.4f}"]
        for margin in MARGINS:
            p = policies[f"learned+pwr_within[0.8/0]@{margin}"]
            seeds = sum(a >= b for a, b in zip(p["grar_per_seed"], fgd["grar_per_seed"]))
            row.append(f"{p['grar']:.4f} / {p['savings_plateau_pct']['mean']:.2f} % "
                       f"({seeds})")
            if seeds == len(fgd["grar_per_seed"]):
                kept[margin].append(p["savings_plateau_pct"]["mean"])
        rows.append(row)
    return rows, traces, kept


def _chain_times(folder: str = "openb_evidence_chain") -> list[tuple[str, int]]:
    times = []
    with open(_result(folder, "times.txt"), encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "s" and parts[1].isdigit():
                times.append((parts[0], int(parts[1])))
    return times


def _chain_command() -> tuple[str, str]:
    """The command that retrains the network, and a note on its setting: one-hot, the
    GPU-model encoding the network reads (a script without that setting trains only it)."""
    return (f"ENCODING=onehot bash {CHAIN} DIR",
            "; ENCODING=onehot: the GPU-model encoding it reads")


def openb_evidence(name: str) -> str:
    from vte import registry
    config = _json(os.path.join(zoo.path(name), "config.json"))
    env = config["env"]
    count, variables = _network_facts(name)
    # The node file's GPU models, from the environment the run names (a core module asks
    # the registry, never the environment's package).
    node_models = registry.of_run(config).make(nodes=env["nodes"], subset=4,
                                               seeds=(1,))[0].model_names
    models = len(node_models)
    node_features = variables["params"]["node_in"]["kernel"].shape[0] - models
    refusal = REFUSAL.format(models=models)
    rows, facts = _openb_rows(config)
    power, power_traces, kept = _power_rows()
    margin_summary = "; ".join(
        f"margin {m} keeps at least FGD's GRAR on all 10 seeds of {len(kept[m])} of the "
        f"{len(power)} traces, saving {min(kept[m]):.2f}-{max(kept[m]):.2f} % there"
        for m in MARGINS[:2])
    times = _chain_times()
    chain, chain_note = _chain_command()
    total = sum(s for _, s in times)
    (step,) = [int(s) for s in os.listdir(os.path.join(zoo.path(name), "checkpoints"))]
    seeds = facts["seeds"]
    nodes, gpus = facts["cluster"]
    more_failed = ", ".join(f"{t} (+{d:.1f} a seed)" for t, d in facts["more_failed"])
    why_failed = "\n".join(f"  {WHY_FAILED[t]}" for t, _ in facts["more_failed"]
                           if t in WHY_FAILED)
    closed = sorted(facts["closed"])
    mean_gain = sum(facts["gain_end"]) / len(facts["gain_end"])
    unseen = [t for t in power_traces if t not in env["pods"].split(",")]
    return f"""## openb-evidence: the OpenB scheduler network

A learned scheduler for the OpenB trace (the Alibaba GPU cluster of the FGD paper): it
places each arriving pod on a node. It allocates more GPUs than FGD at the end of the
replay on {facts['ahead']} of the {len(rows)} bundled traces (mean {mean_gain:+.2f} points).

```python
import vte
policy = vte.load_policy("openb-evidence")   # (key, state, pod, feasible, spec) -> (scores, shared_gpu)
```

```bash
python -m vte.openb --pods default --policies fgd,zoo:openb-evidence --seeds 10
```

### What it is

- **Network**: `vte.openb.network.OpenBNet`, {config['hidden']} hidden units, {count:,}
  parameters. Each node is encoded by one shared MLP from its own features joined with
  the pod's and the arrived share; a deep-sets context (mean and max over the nodes)
  conditions a second per-node layer and gives the "cannot place" logit. The same
  weights serve any number of nodes in any order.
- **Inputs** (`vte.openb.env.Observation`): per node {node_features} features (its
  free CPU, memory and GPUs, FGD's gain and score, its rank, ...) and a one-hot of its GPU
  model, {models} models (the node file `{env['nodes']}`'s: {', '.join(node_models)});
  the pod to place, its GPU model list among its features; the arrived share of the
  cluster's GPUs. Trained at power preference 0: the power inputs add nothing.
- **How it acts**: it scores every node; the replay places the pod on the best-scored
  feasible node (ties to the smallest rank), and a pod that shares a GPU takes FGD's GPU on
  that node. Greedy and deterministic: no sampling.
- **Shipped**: checkpoint {step} of its run (config.json, checksums.json; the checksum is
  verified on every load).

### Training

- **Data**: random {env['subset']}-node sub-clusters of the node file `{env['nodes']}`
  under a bank of {len(env['pods'].split(','))} traces (`{env['pods']}`,
  {env['workloads']} workloads, tune {env['tune']}), an episode replaying one workload on
  one sub-cluster.
- **How**: imitation in five runs, each starting from the one before: FGD, then three
  rounds of the lookahead planner over FGD (the third counting failed pods), then
  {step} updates of the horizon-{config['plan']['horizon']} planner over the third round's
  network, FGD playing its {config['plan']['futures']} futures, leaving the network's node
  only on evidence (z = {config['plan']['confidence']:g}). Its recorded config.json names that
  third round as `{config['init_from']}`, the folder it was trained from, which is no
  longer shipped (it is in the repository's history); loading does not read it.
- **Retrain it** from scratch (the same weights, bit for bit{chain_note}):

```bash
{chain}        # the network is DIR/evidence
```

  {total} s ({total / 60:.1f} min) of training on {MACHINE}, nothing else running
  (2026-12-07): {', '.join(f'{n} {s} s' for n, s in times)}
  (benchmarks/results/openb_evidence_chain/times.txt in the repository).

### GPU allocation on the seventeen traces

Seeds {seeds[0]}..{seeds[-1]}, the full cluster ({nodes:,} nodes, {gpus:,} GPUs), jax
{', '.join(sorted(facts['jax']))} on {MACHINE} (device {', '.join(sorted(facts['device']))}),
2026-12-05; the bounds 2026-12-06.
Allocated GPUs (% of the cluster's) when the arrived demand reaches 100 % and at the end
(130 %): the network / FGD / the LP upper bound no scheduler can pass; the share of FGD's
gap to the bound the network closes at 100 %; its gain over FGD at the end (seeds of
{len(seeds)} ahead); failed pods a seed, the network / FGD.

```bash
python -m vte.openb --pods all --policies fgd,zoo:openb-evidence --seeds 10 --json DIR/
python -m vte.openb.lab.bound --pods TRACE --seeds 10 --json BOUND.json   # each trace
```

{_table(['trace', 'alloc @100 %: net / FGD / bound', 'gap closed', 'alloc @130 %: net / FGD / bound', 'net - FGD @130 % (seeds ahead)', 'failed pods: net / FGD'], rows)}

It closes {closed[0]:.0f}-{closed[-1]:.0f} % of FGD's gap to the bound at 100 %. The raw
files, in the repository: benchmarks/results/openb_distilled_evidence/openb_*.json (the
network is named there by the folder it was measured in,
train/results/openb_distilled_evidence) and benchmarks/results/openb_bound/*.json.

### Power, at its margins

The network saves power by letting PWR choose among the nodes it scores within M nats of
its best, and placing by itself (margin 0) once 80 % of the cluster's GPUs have been asked
for: the policy `pwr_within:M@0.8/0:zoo:openb-evidence` of `python -m vte.openb --power`.
GRAR at x = 1.0 (the allocated share of the arrived GPU demand when it reaches the
cluster's GPUs) / power savings against FGD over the plateau (x = 0.2..0.8), seed means,
and in brackets the seeds of 10 with at least FGD's GRAR. One network, the margin chosen at
decision time: {margin_summary}. Measured on
`default` and {len(unseen)} traces it never trained on, seeds 42..51, {MACHINE}
(2026-12-06):

```bash
python benchmarks/openb_power_learned.py --run zoo:openb-evidence --pods TRACE --preferences "" \\
    --pwr-margins 4,8,12,16 --pwr-switch 0.8/0 --json OUT.json
```

{_table(['trace', 'FGD GRAR'] + [f'margin {m}: GRAR / savings (seeds)' for m in MARGINS], power)}

The raw files, in the repository: benchmarks/results/openb_power_evidence_top_*.json (each
also holds the published mixes PWR and PWR+FGD and wider margins).

### Known limits

- **More failed pods than FGD on {len(facts['more_failed'])} traces**: {more_failed}.
{why_failed}
  (docs/history.md, "Which pods fail"; `python benchmarks/failed_pods.py --pods
  TRACE --policies fgd,zoo:openb-evidence --seeds 10` breaks them down).
- **It needs a node file of the {models} GPU models it learned** (those of `{env['nodes']}`),
  as it reads a node's model one-hot. It refuses, before any replay, a node file of
  another number of models (`python -m vte.openb --policies` and
  `vte.openb.registration.learned_policy` raise ValueError: "{refusal}").
  `openb-agnostic` reads no model's name and serves clusters of other models.
- **Trained on {env['subset']}-node sub-clusters** of three traces; the figures above are
  the full cluster's, measured. On clusters of another shape, or workloads unlike these
  seventeen, it is untested.
- **Allocation, not power**: trained at power preference 0; it saves power only through
  the margins above, chosen by hand.
"""


def _of(count: int, total: int) -> str:
    """'all 17' or '15 of the 17'."""
    return f"all {total}" if count == total else f"{count} of the {total}"


AGNOSTIC_FILES = "openb_agnostic"      # benchmarks/results/: its replays and chain's times


def openb_agnostic(name: str) -> str:
    from vte import registry
    config = _json(os.path.join(zoo.path(name), "config.json"))
    env = config["env"]
    count, variables = _network_facts(name)
    # The node's columns of each encoding, from the environment the run names (a core
    # module asks the registry, never the environment's package): the GPU model's columns
    # are those after the ones both encodings share.
    made = {e: registry.of_run(config).make(nodes=env["nodes"], subset=4, seeds=(1,),
                                            encoding=e) for e in (env["encoding"], "onehot")}
    node_columns = {e: env_.observation_columns(params)["nodes"]
                    for e, (env_, params) in made.items()}
    node_features = next(i for i, (a, b) in enumerate(zip(*node_columns.values())) if a != b)
    gpu_columns = node_columns[env["encoding"]][node_features:]
    assert variables["params"]["node_in"]["kernel"].shape[0] == node_features + len(gpu_columns)
    rows, facts = _openb_rows(config, AGNOSTIC_FILES)
    shipped = _openb_rows(_json(os.path.join(zoo.path("openb-evidence"), "config.json")))[1]
    behind = [t for t, g in facts["gain_by_trace"].items()
              if g < shipped["gain_by_trace"][t]]
    for row, trace in zip(rows, facts["gain_by_trace"]):
        row.insert(5, f"{shipped['gain_by_trace'][trace]:+.2f}")
    mean_gain = sum(facts["gain_end"]) / len(facts["gain_end"])
    shipped_mean = sum(shipped["gain_end"]) / len(shipped["gain_end"])
    times = _chain_times(AGNOSTIC_FILES)
    total = sum(s for _, s in times)
    (step,) = [int(s) for s in os.listdir(os.path.join(zoo.path(name), "checkpoints"))]
    # The choice of the chain, on seeds 100..109: each run's end allocation, by run name.
    chose = {policy.rsplit("/", 1)[-1]: figures["alloc_at_end"]["mean"]
             for file in ("choice_rounds.json", "choice_evidence.json")
             for policy, figures in _json(_result(AGNOSTIC_FILES, file))["policies"].items()}
    seeds = facts["seeds"]
    nodes, gpus = facts["cluster"]
    more_failed = ", ".join(f"{t} (+{d:.1f} a seed)" for t, d in facts["more_failed"]) or "none"
    closed = sorted(facts["closed"])
    columns = "\n".join(f"  - `{c.name}`: {c.meaning}" for c in gpu_columns)
    models = made["onehot"][0].model_names
    table = made["onehot"][1].power                  # OpenB's models' rows of the table
    return f"""## openb-agnostic: the OpenB scheduler network for any GPU models

A learned scheduler for the OpenB trace (the Alibaba GPU cluster of the FGD paper) that
reads no GPU model's name: a node's model enters as numbers from a per-model table, so it
places pods on a cluster of models the trace lacks (A100, H100, ...) once the table has
them. It allocates more GPUs than FGD at the end of the replay on {_of(facts['ahead'], len(rows))}
bundled traces (mean {mean_gain:+.2f} points); `openb-evidence`, which reads a one-hot of
OpenB's {len(models)} models and serves only them, gains {shipped_mean:+.2f}.

```python
import vte
policy = vte.load_policy("openb-agnostic")   # (key, state, pod, feasible, spec) -> (scores, shared_gpu)
```

```bash
python -m vte.openb --pods default --policies fgd,zoo:openb-agnostic --seeds 10
python -m vte.openb --cluster SNAPSHOT --policies all,zoo:openb-agnostic   # your own cluster
python -m vte.serve --protocol kube-extender --policy zoo:openb-agnostic --snapshot SNAPSHOT
```

### What it is

- **Network**: `vte.openb.network.OpenBNet`, {config['hidden']} hidden units, {count:,}
  parameters, the architecture of `openb-evidence`: one shared MLP per node, a deep-sets
  context (mean and max over the nodes), the same weights for any number of nodes.
- **Inputs** (`vte.openb.env.Observation`, encoding `{env['encoding']}`): per node
  {node_features} features as `openb-evidence` reads them (its free CPU, memory and GPUs,
  FGD's gain and score, its rank, ...) and {len(gpu_columns)} for its GPU model:
{columns}

  Besides: the pod to place and the arrived share of the cluster's GPUs. Trained at power
  preference 0: the observation's power fields (`preference`, `power`) add nothing; the
  GPU model's watts above do (they tell apart models of the same memory).
- **Your GPU models**: the table is `vte.openb.power.GPU_MODELS` (memory in GiB, idle and
  busy watts of one GPU; OpenB's {len(models)} models are in it). Add yours with
  `vte.openb.power.add_gpu_model`, or a JSON file `{{"H100-80GB": {{"memory_gib": 80,
  "idle_w": 60, "max_w": 700}}}}` named in the environment variable `VTE_OPENB_GPU_MODELS`,
  which `python -m vte.openb` and the extender read. A snapshot with a model the table
  lacks is refused before any work, naming the model; the extender serves the models of
  its `--snapshot` and `--models` (docs/kubernetes.md).
- **How it acts**: it scores every node; the replay places the pod on the best-scored
  feasible node (ties to the smallest rank), and a pod that shares a GPU takes FGD's GPU on
  that node. Greedy and deterministic.
- **Shipped**: checkpoint {step} of its run (config.json, checksums.json; the checksum is
  verified on every load).

### Training

- **Data**: random {env['subset']}-node sub-clusters of the node file `{env['nodes']}`
  under a bank of {len(env['pods'].split(','))} traces (`{env['pods']}`,
  {env['workloads']} workloads, tune {env['tune']}).
- **How**: imitation in four runs, each starting from the one before: FGD, two rounds of
  the lookahead planner over FGD, then {step} updates of the horizon-{config['plan']['horizon']}
  planner over the second round's network, FGD playing its {config['plan']['futures']}
  futures, leaving the network's node only on evidence (z = {config['plan']['confidence']:g}).
  `openb-evidence`'s chain has a third planner round between; the agnostic network's
  third round scored lower on `default`'s seeds 100..109 ({chose['round3']:.2f} against
  round 2's {chose['round2']:.2f}) and an evidence round over it stayed there
  ({chose['evidence']:.2f}), while over round 2 it kept {chose['evidence_r2']:.2f}, so its
  chain skips that round (seeds 100..109 chose; the figures below are on 42..51). Its
  config.json names the folder it was trained from,
  `{config['init_from']}`, which is not shipped; loading does not read it.
- **Retrain it** from scratch:

```bash
bash {CHAIN} DIR        # the network is DIR/evidence
```

  About {total / 60:.0f} min of training on {MACHINE} shared with other work (2026-12-07):
  {', '.join(f'{n} {s} s' for n, s in times)}. The first three as the script timed them;
  the evidence round's from its run folder's file times, as it was run alone after them
  (benchmarks/results/{AGNOSTIC_FILES}/times.txt in the repository).

### GPU allocation on the seventeen traces

Seeds {seeds[0]}..{seeds[-1]}, the full cluster ({nodes:,} nodes, {gpus:,} GPUs), jax
{', '.join(sorted(facts['jax']))} on {MACHINE} (device {', '.join(sorted(facts['device']))}),
2026-12-07. Allocated GPUs (% of the cluster's) when the arrived demand reaches 100 % and
at the end (130 %): the network / FGD / the LP upper bound; the share of FGD's gap to the
bound it closes at 100 %; its gain over FGD at the end (seeds of {len(seeds)} ahead);
`openb-evidence`'s gain on the same seeds; failed pods a seed, the network / FGD.

```bash
python -m vte.openb --pods all --policies fgd,zoo:openb-agnostic --seeds 10 --json DIR/
```

{_table(['trace', 'alloc @100 %: net / FGD / bound', 'gap closed', 'alloc @130 %: net / FGD / bound', 'net - FGD @130 % (seeds ahead)', 'openb-evidence - FGD', 'failed pods: net / FGD'], rows)}

It closes {closed[0]:.0f}-{closed[-1]:.0f} % of FGD's gap to the bound at 100 %. The raw
files, in the repository: benchmarks/results/{AGNOSTIC_FILES}/openb_*.json (the network is
named there by the folder it was measured in).

### Known limits

- **Behind `openb-evidence` on {len(behind)} of the {len(rows)} traces** (mean
  {mean_gain:+.2f} against {shipped_mean:+.2f} over FGD): on OpenB's own models, use that one.
- **More failed pods than FGD**: {more_failed}.
- **Renamed models, measured; new ones, not**: a cluster whose models are OpenB's under
  other names (the table giving them OpenB's numbers) gets the same decisions
  (tests/test_openb_models.py). On models whose numbers lie outside OpenB's (at most
  {max(table.gpu_memory_gib):g} GiB and {max(table.gpu_busy_w):g} W: an 80 GiB, 700 W H100) the network extrapolates, and how well is not
  measured: replay your cluster against FGD first (`python -m vte.openb --cluster
  SNAPSHOT --policies all,zoo:openb-agnostic`).
- **Trained on {env['subset']}-node sub-clusters** of three traces; the figures above are
  the full cluster's. **Allocation, not power**: trained at power preference 0.
"""


# ------------------------------------------------------------------------- Cluster-v0


def _network_row(evaluation: dict) -> str:
    """The trained network's row of a synthetic run's eval.json: the one entry that is
    neither a heuristic nor the optimum (named `policy` in older files, by the run in newer
    ones)."""
    from vte import registry
    known = registry.registration("Cluster-v0").policies()     # the heuristics and optimal
    (row,) = [p for p in evaluation if p not in known]
    return row


def cluster_imitate(name: str) -> str:
    folder = zoo.path(name)
    config = _json(os.path.join(folder, "config.json"))
    training = _json(os.path.join(folder, "TRAINING.json"))
    evaluation = _json(os.path.join(folder, "eval.json"))
    env = config.get("env", {})
    count, _ = _network_facts(name)
    (step,) = [int(s) for s in os.listdir(os.path.join(folder, "checkpoints"))]
    from vte import registry
    EVAL_EPISODES = registry.registration("Cluster-v0").eval_episodes
    policies = evaluation                       # name -> metrics, the network's row among them
    net = _network_row(policies)
    episodes = config.get("eval_episodes") or EVAL_EPISODES
    order = sorted(policies, key=lambda p: (p != net, -policies[p]["match_rate"]))
    rows = [[("**the network**" if p == net else p),
             f"{policies[p]['match_rate']:.3f}", f"{policies[p]['mean_regret']:.5f}",
             f"{policies[p]['cost_ratio']:.4f}"]
            for p in order]
    best = next(p for p in order if p not in (net, "optimal"))
    spread = [(lambda d: d[_network_row(d)]["match_rate"])(_json(path))
              for path in sorted(glob.glob(os.path.join(
                  REPO, "train", "results", "imitate_online10M_seed[0-9]_eval.json")))]
    return f"""## cluster-imitate: the synthetic-cluster scheduler

A learned scheduler for vte's synthetic cluster (`Cluster-v0`): it assigns each request
of the queue to a node, trained to imitate the known optimum. On held-out episodes it
picks the optimal node {policies[net]['match_rate']:.1%} of the time, against
{policies[best]['match_rate']:.1%} for the best heuristic ({best}).

```python
import vte
policy = vte.load_policy("cluster-imitate")   # (key, obs, params) -> action
```

```bash
python -m vte.serve --policy zoo:cluster-imitate       # DECICE's scheduling API
```

### What it is

- **Network**: `vte.cluster.network.SchedulerNet`, {config['hidden']} hidden units, {count:,}
  parameters, over the nodes and the queue (any number of nodes).
- **Inputs**: the observation of `Cluster-v0` (`vte.Observation`: each node's features,
  the queued requests', the objective weights), {env['num_nodes']} nodes, a queue of
  {env['queue_len']} and episodes of {env['episode_len']} decisions in training.
- **How it acts**: greedy (`vte.load_policy(..., greedy=True)`, the default): the most
  likely action, a node for the head request or none.
- **Shipped**: checkpoint {step} of its run (config.json, checksums.json, eval.json).

### Training

Imitation of the optimal assignment (`train/imitate.py` at its defaults: {config['total_timesteps']:,}
decisions, {config['num_envs']} environments, learning while collecting), seed
{config['seed']}:

```bash
{training['command']}
```

{training['wall_s']:.0f} s ({training['wall_s'] / 60:.1f} min) of wall time on {training['machine']},
jax {training['jax_version']}, {training['date']}{training.get('note', '')}.

### Figures

The run's own evaluation (its `eval.json`, written by `train/imitate.py`): {episodes}
held-out episodes, greedy, every heuristic of `vte.cluster.heuristics` and the optimum on the same
ones. Match rate: the share of decisions on the optimal node; mean regret: the cost a
decision pays above the optimum's; cost ratio: the cost over the optimum's.

{_table(['policy', 'match rate', 'mean regret', 'cost ratio'], rows)}

### Known limits

- **Cluster-v0 only**: it reads that environment's observation; it does not place OpenB
  pods (`openb-evidence` does).
- **Measured at one setting**: trained on objective weights drawn per episode (shown to
  it), it is evaluated above at the weights {tuple(env['weights'])} on {env['num_nodes']}
  nodes; other weights and cluster sizes load and run but are not measured here.
- **One seed of a spread**: the same command at seeds 0..3 reached match rates of
  {min(spread):.3f}-{max(spread):.3f} (train/results/imitate_online10M_seed{{0,1,2,3}}_eval.json
  in the repository).
"""


BUILDERS = {"openb-evidence": openb_evidence, "openb-agnostic": openb_agnostic,
            "cluster-imitate": cluster_imitate}


def build(name: str) -> str:
    """The card text of the zoo's scheduler `name`, from its files."""
    bare = os.path.basename(zoo.path(name))
    if bare not in BUILDERS:
        raise ValueError(f"{name!r} has no card builder: allowed {', '.join(BUILDERS)}")
    return BUILDERS[bare](bare)


def card_path(name: str) -> str:
    return os.path.join(zoo.path(name), zoo.CARD_FILE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vte.zoo.card",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"of {', '.join(zoo.names())}")
    parser.add_argument("--all", action="store_true", help="every scheduler of the zoo")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a CARD.md differs from its rebuild")
    args = parser.parse_args(argv)
    names = zoo.names() if args.all else args.names
    if not names:
        parser.error("name a scheduler of the zoo, or --all")
    stale = []
    for name in names:
        try:
            text = build(name)
        except (ValueError, FileNotFoundError) as err:
            parser.error(str(err))
        path = card_path(name)
        if args.check:
            old = open(path, encoding="utf-8").read() if os.path.isfile(path) else None
            if old != text:
                stale.append(path)
            continue
        atomic_write_text(path, text)
        print(f"wrote {path}")
    for path in stale:
        print(f"{path} differs from its rebuild: run python -m vte.zoo.card --all",
              file=sys.stderr)
    return 1 if stale else 0


class _CallableModule(types.ModuleType):
    """Importing this module makes it the package's attribute `vte.zoo.card`, in place of
    the function `vte.zoo.card(name)`; called, it does what that function does."""

    def __call__(self, name: str) -> str:
        return zoo._read_card(name)


if __name__ == "__main__":
    sys.exit(main())
else:
    sys.modules[__name__].__class__ = _CallableModule
