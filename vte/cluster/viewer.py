"""Pictures of Cluster-v0: a cluster's state as a matplotlib Figure.

    from vte.cluster import viewer
    fig = viewer.render(state, params, action=3, optimal=state.scores.optimum)
    rgb = vte.render.frame(state, params)        # (720, 1280, 3) uint8, its pixels

`vte.render(state, params, ...)` (the front door, `vte/render.py`) draws with this module;
`python -m vte.render` draws an episode of any registered environment.
One frame shows one cluster (an unbatched `EnvState`) as the ground truth has it:
  - nodes as tiles, grouped by site (one box per site) and by tier within a site, each
    tile coloured by CPU utilisation (colour bar below), with its index, its GPUs
    ("free/total model"), and two bars along its bottom: free cores and free memory as a
    share of capacity. A down node is grey and hatched; padded nodes are not drawn;
  - the action taken (blue frame) and the optimal action (green dashed frame), when given;
    deferring is written out beside the legend;
  - the queue, head first and highlighted: archetype, demand (cores, GiB, GPUs and the
    accepted models), work in hours on a reference node, required (+) and rejected (-)
    labels, latency bound;
  - time, decision count, objective weights, the episode's counters, and the cost of
    the chosen and the optimal action for the head request.
Frames are `FRAME_SHAPE` = (720, 1280) pixels (height, width) at any cluster size, and a
state always draws the same pixels. Only Agg is used (no window, no pyplot state).
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from vte.cluster import catalogue as C
from vte.cluster import heuristics
from vte.cluster.env import reward as env_reward
from vte import registry
from vte.cluster.params import EnvParams
from vte.cluster.dynamics import measure
from vte.cluster.types import EnvState
from vte.render import DPI, FIGSIZE

UTIL_CMAP = "RdYlGn_r"  # green idle ... red busy
CHOSEN_COLOR = "tab:blue"
OPTIMAL_COLOR = "tab:green"
DOWN_COLOR = "0.75"
SYNTHETIC = registry.registration("Cluster-v0")


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------

def _host_state(state: EnvState, params: EnvParams) -> EnvState:
    if not isinstance(params, EnvParams):
        raise ValueError(f"params={params!r} is invalid: allowed a vte.EnvParams")
    if not isinstance(state, EnvState):
        raise ValueError(f"state of type {type(state).__name__} is invalid: allowed a "
                         f"vte.EnvState")
    shape = np.shape(state.cluster.mask)
    if shape != (params.num_nodes,):
        raise ValueError(
            f"state with cluster.mask of shape {shape} is invalid: render draws one cluster "
            f"of params.num_nodes={params.num_nodes} nodes, shape ({params.num_nodes},); "
            f"pick one from a batch with jax.tree_util.tree_map(lambda x: x[i], state)")
    return jax.device_get(state)


def _check_action(name: str, value, n: int) -> int | None:
    if value is None:
        return None
    a = np.asarray(value)
    if a.shape != () or a.dtype == np.bool_ or a.dtype.kind not in "iu" \
            or not 0 <= int(a) <= n:
        raise ValueError(f"{name}={value!r} is invalid: allowed None or an integer in "
                         f"[0, num_nodes={n}] (num_nodes = defer)")
    return int(a)


# --------------------------------------------------------------------------
# Layout: sites as boxes in a grid, tiers as rows of tiles within a site
# --------------------------------------------------------------------------

def _layout(site: np.ndarray, tier: np.ndarray, mask: np.ndarray, num_sites: int):
    """Tile positions: ({node: (x, y)}, [(site, x0, y0, w, h)], [(tier, x, y)]), in tile
    units with y growing downwards; only sites that hold a node are laid out."""
    per_site = {s: [i for i in np.flatnonzero(mask) if site[i] == s] for s in range(num_sites)}
    sites = [s for s in range(num_sites) if per_site[s]]
    biggest = max(len(v) for v in per_site.values())
    cols = max(4, math.ceil(math.sqrt(biggest * 1.5)))          # tiles per row in a site
    grid_cols = max(1, math.ceil(math.sqrt(len(sites) * 0.8)))  # site boxes per row

    heights = {}
    for s in sites:
        rows = sum(math.ceil(sum(tier[i] == t for i in per_site[s]) / cols)
                   for t in range(len(C.TIERS)))
        tiers = sum(1 for t in range(len(C.TIERS)) if any(tier[i] == t for i in per_site[s]))
        heights[s] = rows + 0.6 * tiers + 0.9
    pos, boxes, labels = {}, [], []
    y0 = 0.0
    for r in range(0, len(sites), grid_cols):
        row = sites[r:r + grid_cols]
        for c, s in enumerate(row):
            x0 = c * (cols + 1.0)
            y = y0 + 0.9
            for t in range(len(C.TIERS)):
                nodes = [i for i in per_site[s] if tier[i] == t]
                if not nodes:
                    continue
                labels.append((C.TIERS[t], x0 + 0.1, y + 0.45))
                y += 0.6
                for j, i in enumerate(nodes):
                    pos[i] = (x0 + 0.1 + (j % cols), y + (j // cols))
                y += math.ceil(len(nodes) / cols)
            boxes.append((s, x0, y0, cols + 0.2, heights[s]))
        y0 += max(heights[s] for s in row) + 0.6
    return pos, boxes, labels, cols, grid_cols


# --------------------------------------------------------------------------
# Text of the queue and the status panel
# --------------------------------------------------------------------------

def _labels(bits: int, sign: str) -> str:
    return "".join(sign + name for i, name in enumerate(C.LABELS) if bits >> i & 1)


def _request_line(q, i: int) -> str:
    demand = q.demand[i]
    gpus = ""
    if demand[C.GPU] > 0:
        models = "|".join(m for b, m in enumerate(C.GPU_MODELS) if b and q.gpu_models[i] >> b & 1)
        gpus = f"{demand[C.GPU]:.0f} {models}"
    latency = "" if q.latency_bound[i] >= C.NO_LATENCY_BOUND_MS else \
        f"<={q.latency_bound[i]:.0f}ms"
    labels = _labels(int(q.required[i]), "+") + _labels(int(q.rejected[i]), "-")
    return (f"{C.ARCHETYPES[int(q.archetype[i])]:<11} {demand[C.CPU]:>4.0f} "
            f"{demand[C.MEM]:>6.1f} {gpus:<11} {q.work[i] / 3600.0:>5.2f} {latency:<7} "
            f"{labels}")


def _action_name(a: int | None, n: int) -> str:
    return "-" if a is None else ("defer" if a == n else f"node {a}")


# --------------------------------------------------------------------------
# The figure
# --------------------------------------------------------------------------

def render(state: EnvState, params: EnvParams, action=None, optimal=None,
           caption: str | None = None) -> Figure:
    """A matplotlib Figure of one cluster (see the module docstring), FRAME_SHAPE pixels.

    Args:
      state: one `vte.EnvState` (not batched).
      params: its `vte.EnvParams`.
      action: the action taken for the head request, in [0, num_nodes] (num_nodes =
        defer), or None.
      optimal: the optimal action to mark (e.g. `state.scores.optimum`), or None.
      caption: an extra line of text under the status panel.
    Returns:
      A Figure with an Agg canvas (`fig.savefig(...)`, `frame`); not registered with
      pyplot, so nothing stays open.
    """
    st = _host_state(state, params)
    n = params.num_nodes
    action = _check_action("action", action, n)
    optimal = _check_action("optimal", optimal, n)
    cl, nd, q = st.cluster, st.nodes, st.queue
    metrics = jax.device_get(measure(cl, nd))
    cap = np.asarray(cl.capacity)
    free = np.asarray(metrics.free)
    util = np.asarray(metrics.util)
    mask = np.asarray(cl.mask)

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    fig.text(0.01, 0.975, f"t = {float(st.time):,.0f} s   decision {int(st.steps)}/"
             f"{params.episode_len}   weights perf {st.weights[0]:.2f} energy "
             f"{st.weights[1]:.2f} reliability {st.weights[2]:.2f}   "
             f"{int(mask.sum())} nodes, {params.num_sites} sites", fontsize=11, va="top")

    # NODES
    ax = fig.add_axes((0.01, 0.10, 0.60, 0.83))
    ax.set_axis_off()
    pos, boxes, tier_labels, cols, grid_cols = _layout(np.asarray(cl.site), np.asarray(cl.tier),
                                                       mask, params.num_sites)
    width = grid_cols * (cols + 1.0)
    height = max(b[2] + b[4] for b in boxes)
    span = max(width / 0.60 / FIGSIZE[0], height / 0.83 / FIGSIZE[1])  # tile units per inch
    tile_pt = 72.0 / span                                              # one tile in points
    small = float(np.clip(tile_pt * 0.22, 3.0, 9.0))
    for s, x0, y0, w, h in boxes:
        ax.add_patch(Rectangle((x0, y0), w, h, fill=False, edgecolor="0.5", linewidth=0.8))
        ax.text(x0 + 0.1, y0 + 0.45, f"site {s}", fontsize=max(small, 7.0), weight="bold",
                va="center")
    for name, x, y in tier_labels:
        ax.text(x, y, name, fontsize=max(small * 0.9, 6.0), color="0.35", va="center")
    cmap, norm = colormaps[UTIL_CMAP], Normalize(0.0, 1.0)
    for i, (x, y) in pos.items():
        up = bool(nd.up[i])
        ax.add_patch(Rectangle((x, y), 0.9, 0.9, facecolor=cmap(norm(util[i])) if up else
                               DOWN_COLOR, hatch=None if up else "xxx", edgecolor="0.3",
                               linewidth=0.4))
        ax.text(x + 0.05, y + 0.05, str(i), fontsize=small, va="top", ha="left")
        if not up:
            ax.text(x + 0.45, y + 0.45, "down", fontsize=small, ha="center", va="center",
                    weight="bold")
        if cap[C.GPU, i] > 0:
            ax.text(x + 0.45, y + 0.47, f"{max(free[C.GPU, i], 0):.0f}/{cap[C.GPU, i]:.0f} "
                    f"{C.GPU_MODELS[int(cl.gpu_model[i])]}", fontsize=small * 0.85,
                    ha="center", va="center")
        for r, yy in ((C.CPU, 0.70), (C.MEM, 0.80)):
            share = float(np.clip(free[r, i] / max(cap[r, i], 1e-6), 0.0, 1.0))
            ax.add_patch(Rectangle((x + 0.05, y + yy), 0.8, 0.07, facecolor="white",
                                   edgecolor="none"))
            ax.add_patch(Rectangle((x + 0.05, y + yy), 0.8 * share, 0.07, facecolor="0.15",
                                   edgecolor="none"))
    for a, color, style, pad in ((optimal, OPTIMAL_COLOR, "--", 0.09),
                                 (action, CHOSEN_COLOR, "-", 0.04)):
        if a is not None and a < n and a in pos:
            x, y = pos[a]
            ax.add_patch(Rectangle((x - pad, y - pad), 0.9 + 2 * pad, 0.9 + 2 * pad,
                                   fill=False, edgecolor=color, linestyle=style,
                                   linewidth=2.5))
    ax.set_xlim(-0.2, width)
    ax.set_ylim(height + 0.1, -0.2)
    ax.set_aspect("equal", adjustable="box")
    ax.set_anchor("NW")
    fig.legend(handles=[Patch(facecolor="white", edgecolor=CHOSEN_COLOR, linewidth=2,
                              label=f"action: {_action_name(action, n)}"),
                        Patch(facecolor="white", edgecolor=OPTIMAL_COLOR, linestyle="--",
                              linewidth=2, label=f"optimal: {_action_name(optimal, n)}"),
                        Patch(facecolor=DOWN_COLOR, hatch="xxx", edgecolor="0.3",
                              label="down"),
                        Patch(facecolor="0.15", label="bars: free cores, free memory")],
               loc="center", bbox_to_anchor=(0.31, 0.075), ncol=4, fontsize=8,
               frameon=False)
    cax = fig.add_axes((0.16, 0.03, 0.40, 0.014))
    cbar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=cax,
                        orientation="horizontal")
    cbar.ax.tick_params(labelsize=7)
    fig.text(0.15, 0.037, "CPU utilisation", fontsize=8, ha="right", va="center")

    # QUEUE
    qa = fig.add_axes((0.63, 0.36, 0.36, 0.57))
    qa.set_axis_off()
    qa.text(0.0, 1.0, "queue (head first)", fontsize=11, weight="bold", va="top",
            transform=qa.transAxes)
    header = f"{'archetype':<11} {'cores':>4} {'GiB':>6} {'GPUs':<11} {'hours':>5} " \
             f"{'latency':<7} labels"
    qa.text(0.0, 0.93, header, family="monospace", fontsize=7, va="top", color="0.3",
            transform=qa.transAxes)
    valid = np.flatnonzero(np.asarray(q.valid))
    line = min(0.06, 0.86 / max(len(valid), 1))
    for row, i in enumerate(valid):
        y = 0.87 - row * line
        qa.text(0.0, y, _request_line(q, i), family="monospace", fontsize=7, va="top",
                transform=qa.transAxes, weight="bold" if row == 0 else "normal",
                bbox=dict(facecolor="#fff3b0", edgecolor="0.6", pad=2) if row == 0 else None)
    if len(valid) == 0:
        qa.text(0.0, 0.87, "(empty: every action but defer is invalid)", fontsize=8,
                va="top", transform=qa.transAxes)

    # STATUS
    c = st.counters
    cost = np.asarray(st.scores.cost)
    feasible = np.asarray(st.scores.feasible)
    lines = [f"head request: {int(feasible[:n].sum())} feasible nodes, optimum "
             f"{_action_name(int(st.scores.optimum), n)} (cost {cost[int(st.scores.optimum)]:.3f})"]
    if action is not None:
        regret = -float(env_reward(st, jnp.int32(action), params))
        lines.append(f"action {_action_name(action, n)}: "
                     + (f"cost {cost[action]:.3f}, regret {float(regret):.3f}"
                        if feasible[action] else f"infeasible, penalty {float(regret):.3f}"))
    lines += [f"placed {int(c.placed)}  deferred {int(c.deferred)}  invalid {int(c.invalid)}"
              f"  dropped {int(c.dropped)}",
              f"completed {int(c.completed)}  jobs lost {int(c.jobs_lost)}  matched optimum "
              f"{int(c.matched)}",
              f"regret {float(c.regret):.3f}  extra energy {float(c.energy) / 3.6e6:.2f} kWh"]
    if caption:
        lines.append(str(caption))
    fig.text(0.63, 0.33, "\n".join(lines), fontsize=8.5, va="top", family="monospace",
             linespacing=1.5)
    return fig

Policy = Callable[[jax.Array, object, EnvParams], jax.Array]


def resolve_policy(spec: str, run_seed: int = 0) -> tuple[Policy, dict | None]:
    """A policy of the synthetic cluster from a heuristic name (`vte.cluster.heuristics.ALL`) or a
    training run directory (`vte.load_policy`: `DIR@STEP` and the zoo's `zoo:NAME` too);
    for a run, also its configuration."""
    if spec in heuristics.ALL:
        return heuristics.ALL[spec], None
    from vte.checkpoint import is_run_path
    if is_run_path(spec):
        from vte.checkpoint import load_config, load_policy
        config = load_config(spec)
        if registry.of_run(config) is not SYNTHETIC:
            raise ValueError(f"--policy {spec!r} trained on {registry.of_run(config).id}; "
                             "this draws vte's clusters (python -m vte.render --env "
                             f"{registry.of_run(config).flag} draws it)")
        return load_policy(spec, seed=run_seed), config
    raise ValueError(f"--policy {spec!r} is invalid: allowed one of {sorted(heuristics.ALL)} "
                     f"or a training run directory (the --out of train/ppo.py or "
                     f"train/imitate.py) or zoo:NAME (vte.zoo.names())")


def run_params(config: dict) -> dict:
    """The EnvParams fields a training run's configuration records (its "env" section)."""
    return SYNTHETIC.run_make(config)


