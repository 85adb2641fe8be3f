"""Pictures of any registered environment, and animations of an episode.

    fig = vte.render(state, params, action=3, optimal=state.scores.optimum)  # Cluster-v0:
                                                 # the module is callable
    fig.savefig("cluster.png")                   # a matplotlib Figure, FRAME_SHAPE pixels
    rgb = vte.render.frame(state, params)        # (720, 1280, 3) uint8

    python -m vte.render --policy kube_default --out episode.gif
    python -m vte.render --policy runs/ppo --out episode.gif    # a trained run directory
    python -m vte.render --env openb --policy fgd --set subset=32 --out openb.gif

Each environment draws its own state (its registration's `render`: Cluster-v0's is
`vte.cluster.viewer`, OpenB-v0's `vte.openb.viewer`); this module holds what they share:
the frame size, the pixels of a figure, the GIF writer and the episode loop. Frames are
`FRAME_SHAPE` = (720, 1280) pixels (height, width) at any cluster size. Only Agg is used
(no window, no pyplot state).
"""

from __future__ import annotations

import argparse
import ast
import sys
import types
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vte import registry

FIGSIZE = (12.8, 7.2)   # inches
DPI = 100
FRAME_SHAPE = (round(FIGSIZE[1] * DPI), round(FIGSIZE[0] * DPI))   # (height, width) px
DEFAULT_ENV = "Cluster-v0"   # what `vte.render(state, params)` draws


def to_rgb(fig: Figure) -> np.ndarray:
    """The pixels of a figure: (height, width, 3) uint8."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    return np.array(canvas.buffer_rgba())[..., :3]



def render(state, params, action=None, optimal=None, caption: str | None = None) -> Figure:
    """A Cluster-v0 state as a Figure (its registration's `render`, `vte.cluster.viewer`)."""
    return registry.registration(DEFAULT_ENV).render(state, params, action, optimal, caption)


def frame(state, params, action=None, optimal=None, caption: str | None = None) -> np.ndarray:
    """`render` as pixels: (FRAME_SHAPE[0], FRAME_SHAPE[1], 3) uint8."""
    return to_rgb(render(state, params, action, optimal, caption))


def episode_frames(policy: Callable, params, key: jax.Array, steps: int) -> list[np.ndarray]:
    """`steps` frames of one Cluster-v0 episode under `policy(key, obs, params) -> action`:
    each the state before a decision, with the policy's action and the optimal one.
    Deterministic for a key; auto-resets as `vte.step` does."""
    if not callable(policy):
        raise ValueError(f"policy={policy!r} is invalid: allowed a callable "
                         f"(key, obs, params) -> action")
    reg = registry.registration(DEFAULT_ENV)
    env, params = reg.make(params=params)
    return env_episode_frames(reg.id, reg.as_action(policy), key, steps, env=env, params=params)


def save_animation(frames: list[np.ndarray], path: str, fps: float = 2.0) -> None:
    """Write frames (each (H, W, 3) uint8) as an animated GIF, looping."""
    from PIL import Image
    if not frames:
        raise ValueError("frames is empty: allowed one frame or more")
    if not fps > 0:
        raise ValueError(f"fps={fps!r} is invalid: allowed a number > 0")
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], loop=0,
                   duration=int(round(1000.0 / fps)))


def _literal(value: str):
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value            # a bare word: a string (a trace name, a path)


def env_episode_frames(name: str, act: Callable, key: jax.Array, steps: int,
                       env=None, params=None, **make) -> list[np.ndarray]:
    """`steps` frames of one episode of a registered environment (`vte.registry`) under
    `act(key, state, params) -> action`: each the state before a decision, with the action
    and the reference policy's (the known optimum, else the default teacher). The
    environment is `env, params`, or `vte.make(name, **make)`. Deterministic for a key;
    auto-resets as `env.step` does."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps={steps!r} is invalid: allowed an integer >= 1")
    reg = registry.registration(name)
    if reg.render is None:
        raise ValueError(f"environment {reg.id} has no picture (its registration's render)")
    if env is None:
        env, params = reg.make(**make)
    ref = reg.policies()[reg.optimum or reg.default_teacher]
    choose = jax.jit(lambda k, st, p: (act(k, st, p), ref(k, st, p)))
    step = jax.jit(env.step)
    k_reset, key = jax.random.split(key)
    _, state = jax.jit(env.reset)(k_reset, params)
    frames = []
    for _ in range(steps):
        key, k_policy, k_step = jax.random.split(key, 3)
        action, reference = choose(k_policy, state, params)
        host = jax.device_get(state)
        frames.append(to_rgb(reg.render(host, params, int(action), int(reference))))
        _, state, *_ = step(k_step, state, jnp.asarray(action, jnp.int32), params)
    return frames


def main(argv: list[str] | None = None) -> str:
    """`python -m vte.render`: an animated GIF of one episode under a policy, on any
    registered environment (`--env`)."""
    parser = argparse.ArgumentParser(
        prog="python -m vte.render", description="Draw one episode under a policy as an "
        "animated GIF: each frame the cluster before a decision, the action and the "
        "reference (the optimum, or the environment's default teacher).")
    parser.add_argument("--env", default=None, choices=registry.flags() + registry.registered(),
                        help="the environment (default: a run's own, else synthetic)")
    parser.add_argument("--policy", default=None,
                        help="a reference policy of the environment (synthetic: "
                             f"{', '.join(sorted(registry.registration(DEFAULT_ENV).policies()))}; default "
                             "kube_default; openb: the six published ones, default fgd) or a "
                             "training run directory")
    parser.add_argument("--out", default="episode.gif", help="where to write the GIF")
    parser.add_argument("--steps", type=int, default=24, help="decisions to draw")
    parser.add_argument("--seed", type=int, default=0, help="seed of the scenario")
    parser.add_argument("--run-seed", type=int, default=0,
                        help="which of a run's --seeds models to load")
    parser.add_argument("--fps", type=float, default=2.0, help="frames per second")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a parameter of the environment's vte.make, e.g. --set "
                             "num_nodes=16 (synthetic) or --set subset=32 --set "
                             "pods=gpuspec10 (openb); repeatable; for a run directory, on "
                             "top of the run's own environment")
    args = parser.parse_args(argv)

    config = None
    from vte.checkpoint import is_run_path
    if args.policy is not None and is_run_path(args.policy):   # a run, DIR@STEP or zoo:NAME
        from vte.checkpoint import load_config, load_policy
        config = load_config(args.policy)
        reg = registry.of_run(config)
        if args.env is not None and registry.registration(args.env) is not reg:
            raise ValueError(f"--policy {args.policy!r} trained on --env {reg.flag}, not "
                             f"--env {args.env}")
        act = reg.as_action(load_policy(args.policy, seed=args.run_seed))
        fields = reg.run_make(config)
    else:
        reg = registry.registration(args.env or DEFAULT_ENV)
        name = args.policy or reg.default_policy
        known = reg.policies()
        if name not in known:
            raise ValueError(f"--policy {name!r} is invalid: allowed one of {sorted(known)} "
                             f"or a training run directory (the --out of train/ppo.py or "
                             f"train/imitate.py)")
        act, fields = known[name], {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r} is invalid: allowed NAME=VALUE")
        fields[key] = _literal(value)
    try:
        env, params = reg.make(**fields)
    except TypeError as err:    # an unknown keyword of the environment's make
        raise ValueError(f"--set: {err}") from None
    frames = env_episode_frames(reg.id, act, jax.random.PRNGKey(args.seed), args.steps,
                                env=env, params=params)
    save_animation(frames, args.out, args.fps)
    print(f"wrote {args.out}: {len(frames)} frames of {FRAME_SHAPE[1]}x{FRAME_SHAPE[0]} px, "
          f"{reg.id}, policy {args.policy or name}, {env.num_actions(params) - 1} nodes, "
          f"seed {args.seed}")
    return args.out


class _CallableModule(types.ModuleType):
    """This module, callable: `vte.render(state, params, ...)` is `render(...)`, while
    `vte.render.frame` and the rest stay reachable as attributes."""

    def __call__(self, state, params, action=None, optimal=None,
                 caption: str | None = None) -> Figure:
        return render(state, params, action, optimal, caption)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["render", "frame", "to_rgb", "episode_frames", "env_episode_frames", "save_animation",
           "main", "FRAME_SHAPE", "FIGSIZE", "DPI"]


if __name__ == "__main__":
    try:
        main()
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
