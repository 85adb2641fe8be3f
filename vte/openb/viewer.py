"""Pictures of one state of the OpenB GPU-sharing cluster replay.

    fig = render_cluster(spec, st, pod, action=5, reference=fgd_node, model_names=nodes.models)
    fig.savefig("openb.png")                     # a matplotlib Figure, FRAME_SHAPE pixels
    rgb = frame_cluster(spec, st, pod)           # (720, 1280, 3) uint8

One frame shows one cluster (`cluster.Spec` and `cluster.State`, unbatched, N nodes):
  - nodes as tiles in index order, each with its 8 GPU slots (4 x 2; a slot the node lacks
    is a dotted outline), a slot coloured by its allocated milli-GPU (1000 - gpu_free, colour
    bar below), a band coloured by the node's GPU model (legend; grey: no GPU), and two bars:
    requested CPU and memory as a share of capacity. At most `max_nodes` are drawn, and the
    header says so when some are not;
  - the chosen node (blue frame) and a reference policy's node (green dashed frame), when
    given; N, "cannot place", is written out instead;
  - the pod to place: cores, GiB, GPUs x milli-GPU, allowed models, feasible nodes;
  - allocated GPU % (allocated milli over the cluster's GPUs), fragmentation % (sum of
    `State.frag` over the cluster's GPU milli) and arrived % (`State.arrived`, likewise).
Frames are `vte.render.FRAME_SHAPE` = (720, 1280) pixels at any cluster size, and a state
always draws the same pixels. Only Agg is used (no window, no pyplot state).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from vte.openb import cluster
from vte.openb.cluster import Pod, Spec, State
from vte.openb.trace import MAX_GPUS_PER_NODE, MILLI, model_names
from vte.render import DPI, FIGSIZE, FRAME_SHAPE, save_animation, to_rgb

ALLOC_CMAP = "YlOrRd"        # pale: idle ... dark red: fully allocated
CHOSEN_COLOR = "tab:blue"
REFERENCE_COLOR = "tab:green"
NO_GPU_COLOR = "0.82"
BAR_COLOR = "0.25"
MODEL_COLORS = ("tab:purple", "tab:cyan", "tab:brown", "tab:pink", "tab:olive", "navy",
                "teal", "darkkhaki", "orchid", "sienna")   # away from the frames' and slots'

# Tile geometry in slot units (one GPU slot is 1 x 1; y grows downwards).
SLOT_COLS, SLOT_ROWS = 4, 2
LABEL_H = 0.8                        # node index above the slots
SLOTS_Y = LABEL_H
BAND_Y, BAND_H = SLOTS_Y + SLOT_ROWS + 0.1, 0.4
CPU_Y, MEM_Y, BAR_H = BAND_Y + BAND_H + 0.1, BAND_Y + BAND_H + 0.55, 0.4
TILE_BOTTOM = MEM_Y + BAR_H
PITCH_X, PITCH_Y = SLOT_COLS + 0.7, TILE_BOTTOM + 0.7
NODES_BOX = (0.01, 0.12, 0.72, 0.79)  # figure fraction: left, bottom, width, height

assert SLOT_COLS * SLOT_ROWS == MAX_GPUS_PER_NODE


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------

def _host(name: str, x, shape: tuple[int, ...], hint: str = "") -> np.ndarray:
    a = np.asarray(x)
    if a.shape != shape:
        raise ValueError(f"{name} of shape {a.shape} is invalid: allowed shape {shape}{hint}")
    return a


def _check_index(name: str, value, n: int) -> int | None:
    if value is None:
        return None
    a = np.asarray(value)
    if a.shape != () or a.dtype == np.bool_ or a.dtype.kind not in "iu" or not 0 <= int(a) <= n:
        raise ValueError(f"{name}={value!r} is invalid: allowed None or an integer in "
                         f"[0, N={n}] (N = cannot place)")
    return int(a)


def _check(spec, st, pod, action, reference, model_names, max_nodes):
    """Host copies of the inputs, every check done before anything is drawn."""
    if not isinstance(spec, Spec):
        raise ValueError(f"spec of type {type(spec).__name__} is invalid: allowed a "
                         f"vte.openb.cluster.Spec")
    if not isinstance(st, State):
        raise ValueError(f"st of type {type(st).__name__} is invalid: allowed a "
                         f"vte.openb.cluster.State")
    if pod is not None and not isinstance(pod, Pod):
        raise ValueError(f"pod of type {type(pod).__name__} is invalid: allowed None or a "
                         f"vte.openb.cluster.Pod")
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, (int, np.integer)) \
            or max_nodes < 1:
        raise ValueError(f"max_nodes={max_nodes!r} is invalid: allowed an integer >= 1")
    shape = np.shape(spec.cpu_milli)
    if len(shape) != 1 or shape[0] < 1:
        raise ValueError(f"spec with cpu_milli of shape {shape} is invalid: the viewer draws "
                         f"one cluster, shape (N,) with N >= 1; pick one from a batch with "
                         f"jax.tree_util.tree_map(lambda x: x[i], spec)")
    n = shape[0]
    g = MAX_GPUS_PER_NODE
    hint = " (one cluster; pick one from a batch with jax.tree_util.tree_map)"
    host = dict(
        cpu_cap=_host("spec.cpu_milli", spec.cpu_milli, (n,)),
        mem_cap=_host("spec.memory_mib", spec.memory_mib, (n,), hint),
        num_gpus=_host("spec.num_gpus", spec.num_gpus, (n,), hint),
        model=_host("spec.model", spec.model, (n,), hint).astype(np.int64),
        exists=_host("spec.gpu_exists", spec.gpu_exists, (g, n), hint).astype(bool),
        gpu_free=_host("st.gpu_free", st.gpu_free, (g, n), hint),
        cpu_free=_host("st.cpu_free", st.cpu_free, (n,), hint),
        mem_free=_host("st.mem_free", st.mem_free, (n,), hint),
        frag=_host("st.frag", st.frag, (n,), hint).astype(np.float64),
        arrived=_host("st.arrived", st.arrived, (), hint),
    )
    if pod is not None:
        for field in ("cpu_milli", "memory_mib", "num_gpus", "gpu_milli", "model_mask", "valid"):
            _host(f"pod.{field}", getattr(pod, field), (),
                  " (one pod, e.g. vte.openb.env.current_pod(state, params))")
    action = _check_index("action", action, n)
    reference = _check_index("reference", reference, n)
    num_models = int(max(host["model"].max(initial=-1), -1)) + 1
    if pod is not None:
        num_models = max(num_models, int(np.asarray(pod.model_mask)).bit_length())
    if model_names is not None:
        if isinstance(model_names, str) or not all(isinstance(m, str) for m in model_names):
            raise ValueError(f"model_names={model_names!r} is invalid: allowed None or a "
                             f"tuple of str (e.g. NodeTable.models)")
        model_names = tuple(model_names)
        if len(model_names) < num_models:
            raise ValueError(f"model_names={model_names!r} is invalid: it names "
                             f"{len(model_names)} models and the cluster or pod uses model "
                             f"indices up to {num_models - 1}")
    else:
        model_names = tuple(f"model {m}" for m in range(num_models))
    return n, host, action, reference, model_names


# --------------------------------------------------------------------------
# Layout and text
# --------------------------------------------------------------------------

def _grid(count: int, width_in: float, height_in: float) -> tuple[int, int, float]:
    """(columns, rows, inches per slot unit) that draw `count` tiles largest in the box."""
    best = (1, count, 0.0)
    for cols in range(1, count + 1):
        rows = math.ceil(count / cols)
        scale = min(width_in / (cols * PITCH_X), height_in / (rows * PITCH_Y))
        if scale > best[2]:
            best = (cols, rows, scale)
    return best


def _count(k: int, what: str) -> str:
    return f"{k} {what}" + ("" if k == 1 else "s")


def _pct(milli: float, total: int) -> float:
    return float(milli) / max(total, 1) * 100.0


def _node_name(a: int | None, n: int) -> str:
    return "-" if a is None else ("cannot place" if a == n else f"node {a}")


def _pod_lines(pod: Pod | None, feasible: np.ndarray | None, names: tuple[str, ...]) -> list[str]:
    if pod is None:
        return ["(none given)"]
    if not bool(np.asarray(pod.valid)):
        return ["(padding: the workload is over)"]
    num, milli = int(np.asarray(pod.num_gpus)), int(np.asarray(pod.gpu_milli))
    if num == 0:
        gpus = "none (CPU-only)"
    else:
        gpus = f"{num} x {milli} milli" + (" (shared)" if num == 1 and milli < MILLI else "")
    cores = int(np.asarray(pod.cpu_milli)) / 1000
    lines = [f"CPU     {cores:g} core" + ("" if cores == 1 else "s"),
             f"memory  {int(np.asarray(pod.memory_mib)) / 1024:.2f} GiB",
             f"GPUs    {gpus}"]
    if num > 0:
        lines.append(f"models  {model_names(int(np.asarray(pod.model_mask)), names)}")
    if feasible is not None:
        lines.append(f"feasible nodes: {int(feasible.sum())} of {len(feasible)}")
    return lines


def _model_colors(num_models: int) -> list:
    if num_models <= len(MODEL_COLORS):
        return list(MODEL_COLORS)
    cmap = colormaps["tab20"]
    return [cmap(m % cmap.N) for m in range(num_models)]


# --------------------------------------------------------------------------
# The figure
# --------------------------------------------------------------------------

def render_cluster(spec: Spec, st: State, pod: Pod | None = None, action: int | None = None,
                   reference: int | None = None, model_names: tuple[str, ...] | None = None,
                   caption: str | None = None, max_nodes: int = 256) -> Figure:
    """A matplotlib Figure of one OpenB cluster state (module docstring), FRAME_SHAPE pixels.

    Args:
      spec: the cluster's `Spec` ((N,) per field, not batched).
      st: its `State`.
      pod: the pod to place (`env.current_pod(state, params)`), or None.
      action: the chosen node in [0, N] (N = cannot place), or None.
      reference: a reference policy's node (e.g. FGD's), in [0, N], or None.
      model_names: names of the GPU models (`NodeTable.models`); None: "model 0", ...
      caption: an extra line of text in the side panel.
      max_nodes: draw at most the first `max_nodes` nodes (the header says how many).
    Returns:
      A Figure with an Agg canvas (`fig.savefig(...)`, `to_rgb`); not registered with
      pyplot, so nothing stays open.
    Raises:
      ValueError naming the bad input, before anything is drawn.
    """
    n, h, action, reference, model_names = _check(spec, st, pod, action, reference,
                                                  model_names, max_nodes)
    exists, model = h["exists"], h["model"]
    alloc = np.where(exists, MILLI - h["gpu_free"].astype(np.int64), 0)          # (G, N)
    total = int(exists.sum()) * MILLI
    feasible = None
    if pod is not None and bool(np.asarray(pod.valid)):
        feasible = np.asarray(cluster.feasible(st, pod, spec))

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)

    # HEADER
    shown = min(n, int(max_nodes))
    fig.text(0.01, 0.982, f"OpenB cluster: {_count(n, 'node')}, "
             f"{_count(total // MILLI, 'GPU')}", fontsize=12, weight="bold", va="top")
    fig.text(0.01, 0.945, f"allocated {_pct(alloc.sum(), total):.1f}% of GPUs   "
             f"fragmentation {_pct(np.nan_to_num(h['frag']).sum(), total):.1f}%   "
             f"arrived {_pct(int(h['arrived']), total):.1f}%   "
             f"({int(alloc.sum()):,} of {total:,} milli-GPU allocated)",
             fontsize=10, va="top")
    if shown < n:
        fig.text(0.73, 0.982, f"showing {shown} of {n} nodes (0 to {shown - 1})",
                 fontsize=10, ha="right", va="top", color="tab:red", weight="bold")

    # NODES
    _, _, width, height = NODES_BOX
    ax = fig.add_axes(NODES_BOX)
    ax.set_axis_off()
    cols, rows, scale = _grid(shown, width * FIGSIZE[0], height * FIGSIZE[1])
    slot_pt = scale * 72.0
    cmap, norm = colormaps[ALLOC_CMAP], Normalize(0.0, float(MILLI))
    colors = _model_colors(max(len(model_names), 1))
    label_fs = float(min(slot_pt * 0.6, 9.0))
    per_node_labels = label_fs >= 4.0
    slot_text = slot_pt * 0.3 >= 4.5
    bar_text = slot_pt * BAR_H * 0.75 >= 4.5
    pos = {}
    for i in range(shown):
        x, y = (i % cols) * PITCH_X, (i // cols) * PITCH_Y
        pos[i] = (x, y)
        if per_node_labels:
            name = f"{i}" + (f"  {model_names[model[i]]}" if slot_pt >= 16 and model[i] >= 0
                             else "")
            ax.text(x, y + LABEL_H - 0.1, name, fontsize=label_fs, va="bottom", ha="left")
        elif i % cols == 0:
            ax.text(x - 0.3, y + SLOTS_Y + 1.0, str(i), fontsize=5, va="center", ha="right")
        for g in range(MAX_GPUS_PER_NODE):
            sx, sy = x + g % SLOT_COLS, y + SLOTS_Y + g // SLOT_COLS
            if exists[g, i]:
                ax.add_patch(Rectangle((sx, sy), 1.0, 1.0, facecolor=cmap(norm(alloc[g, i])),
                                       edgecolor="0.3", linewidth=0.4))
                if slot_text:
                    ax.text(sx + 0.5, sy + 0.5, str(int(alloc[g, i])),
                            fontsize=min(slot_pt * 0.3, 8.0), ha="center", va="center",
                            color="white" if alloc[g, i] > 0.6 * MILLI else "black")
            else:
                ax.add_patch(Rectangle((sx + 0.08, sy + 0.08), 0.84, 0.84, fill=False,
                                       edgecolor="0.8", linestyle=":", linewidth=0.5))
        m = int(model[i])
        ax.add_patch(Rectangle((x, y + BAND_Y), SLOT_COLS, BAND_H, edgecolor="none",
                               facecolor=colors[m % len(colors)] if m >= 0 else NO_GPU_COLOR))
        for by, free, cap, what, unit in ((CPU_Y, h["cpu_free"][i], h["cpu_cap"][i], "CPU", 1000),
                                          (MEM_Y, h["mem_free"][i], h["mem_cap"][i], "mem", 1024)):
            used = float(np.clip(1.0 - float(free) / max(float(cap), 1.0), 0.0, 1.0))
            ax.add_patch(Rectangle((x, y + by), SLOT_COLS, BAR_H, facecolor="white",
                                   edgecolor="0.6", linewidth=0.3))
            ax.add_patch(Rectangle((x, y + by), SLOT_COLS * used, BAR_H, facecolor=BAR_COLOR,
                                   edgecolor="none"))
            if bar_text:
                ax.text(x + SLOT_COLS - 0.05, y + by + BAR_H / 2,
                        f"{what} {(float(cap) - float(free)) / unit:.0f}/{float(cap) / unit:.0f}",
                        fontsize=min(slot_pt * BAR_H * 0.75, 7.0), ha="right", va="center",
                        color="0.1", bbox=dict(facecolor="white", edgecolor="none", pad=0.3,
                                               alpha=0.7))
    for a, color, style, pad in ((reference, REFERENCE_COLOR, "--", 0.32),
                                 (action, CHOSEN_COLOR, "-", 0.14)):
        if a is not None and a in pos:
            x, y = pos[a]
            ax.add_patch(Rectangle((x - pad, y - pad), SLOT_COLS + 2 * pad,
                                   TILE_BOTTOM + 2 * pad, fill=False, edgecolor=color,
                                   linestyle=style, linewidth=2.2))
    ax.set_xlim(-0.6, cols * PITCH_X)
    ax.set_ylim(rows * PITCH_Y, -0.4)
    ax.set_aspect("equal", adjustable="box")
    ax.set_anchor("NW")

    cax = fig.add_axes((0.16, 0.045, 0.40, 0.016))
    cbar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=cax, orientation="horizontal")
    cbar.ax.tick_params(labelsize=7)
    fig.text(0.15, 0.053, "allocated milli-GPU", fontsize=8, ha="right", va="center")

    # SIDE PANEL: pod, choices, legend, caption
    px = 0.755
    fig.text(px, 0.90, "pod to place", fontsize=11, weight="bold", va="top")
    fig.text(px, 0.865, "\n".join(_pod_lines(pod, feasible, model_names)), fontsize=8.5,
             va="top", family="monospace", linespacing=1.5)

    def choice(a):
        text = _node_name(a, n)
        return text + (" (not shown)" if a is not None and shown <= a < n else "")
    fig.text(px, 0.66, f"action:    {choice(action)}\nreference: {choice(reference)}",
             fontsize=8.5, va="top", family="monospace", linespacing=1.5,
             weight="bold" if n in (action, reference) else "normal")

    counts = np.bincount(model[model >= 0], minlength=len(model_names))
    handles = [Patch(facecolor="white", edgecolor=CHOSEN_COLOR, linewidth=2, label="action"),
               Patch(facecolor="white", edgecolor=REFERENCE_COLOR, linestyle="--", linewidth=2,
                     label="reference")]
    handles += [Patch(facecolor=colors[m % len(colors)],
                      label=f"{model_names[m]} ({_count(int(c), 'node')})")
                for m, c in enumerate(counts) if c > 0]
    if (model < 0).any():
        handles.append(Patch(facecolor=NO_GPU_COLOR,
                             label=f"no GPU ({_count(int((model < 0).sum()), 'node')})"))
    handles += [Patch(facecolor="white", edgecolor="0.7", linestyle=":", label="no GPU slot"),
                Patch(facecolor=BAR_COLOR, label="bars: CPU, memory used")]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(px - 0.005, 0.59),
               fontsize=7.5, frameon=False, ncol=1 if len(handles) <= 14 else 2,
               title="legend (band: GPU model)", title_fontsize=8,
               alignment="left")
    if caption:
        fig.text(px, 0.03, str(caption), fontsize=8.5, va="bottom", wrap=True)
    return fig


def frame_cluster(spec: Spec, st: State, pod: Pod | None = None, action: int | None = None,
                  reference: int | None = None, model_names: tuple[str, ...] | None = None,
                  caption: str | None = None, max_nodes: int = 256) -> np.ndarray:
    """`render_cluster` as pixels: (FRAME_SHAPE[0], FRAME_SHAPE[1], 3) uint8."""
    return to_rgb(render_cluster(spec, st, pod, action, reference, model_names, caption,
                                 max_nodes))


__all__ = ["render_cluster", "frame_cluster", "to_rgb", "save_animation", "FRAME_SHAPE",
           "FIGSIZE", "DPI"]
