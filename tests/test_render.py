"""Pictures of a cluster: size, determinism, what changes them, bad input, the GIF command
for a heuristic and for a training run directory."""

import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from PIL import Image

import vte
from tests.conftest import SMALL
from vte import render as R
from vte.checkpoint import CONFIG_FILE, checkpoint_manager

MEDIUM = vte.EnvParams(num_nodes=40, queue_len=6, num_sites=3, episode_len=8)


def test_frame_has_the_documented_size_at_any_cluster_size(jit_reset):
    assert R.FRAME_SHAPE == (720, 1280)
    for params in (SMALL, MEDIUM):
        _, state = (jit_reset if params is SMALL else jax.jit(vte.reset))(
            jax.random.PRNGKey(0), params)
        fig = R.render(state, params, action=1, optimal=int(state.scores.optimum))
        px = R.to_rgb(fig)
        assert px.shape == R.FRAME_SHAPE + (3,) and px.dtype == np.uint8
        assert px.std() > 10                              # something is drawn


def test_identical_states_draw_identical_pixels(jit_reset):
    _, a = jit_reset(jax.random.PRNGKey(3), SMALL)
    _, b = jit_reset(jax.random.PRNGKey(3), SMALL)
    _, other = jit_reset(jax.random.PRNGKey(4), SMALL)
    fa = R.frame(a, SMALL, action=2, optimal=int(a.scores.optimum))
    assert np.array_equal(fa, R.to_rgb(R(a, SMALL, 2, int(a.scores.optimum))))  # callable
    fb = R.frame(b, SMALL, action=2, optimal=int(b.scores.optimum))
    assert np.array_equal(fa, fb)
    assert not np.array_equal(fa, R.frame(other, SMALL, action=2,
                                          optimal=int(other.scores.optimum)))
    # The action, the optimum and a down node each change the picture.
    assert not np.array_equal(fa, R.frame(a, SMALL, action=3, optimal=int(a.scores.optimum)))
    assert not np.array_equal(fa, R.frame(a, SMALL, action=2))
    down = a.replace(nodes=a.nodes.replace(up=a.nodes.up.at[0].set(False)))
    assert not np.array_equal(fa, R.frame(vte.rescore(down, SMALL), SMALL, action=2,
                                          optimal=int(a.scores.optimum)))


def test_bad_input_is_named(jit_reset):
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    _, batch = jax.jit(jax.vmap(vte.reset, (0, None)))(keys, SMALL)
    with pytest.raises(ValueError, match=r"render draws one cluster.*shape \(8,\)"):
        R.render(batch, SMALL)
    _, state = jit_reset(jax.random.PRNGKey(0), SMALL)
    with pytest.raises(ValueError, match=r"action=9 is invalid.*\[0, num_nodes=8\]"):
        R.render(state, SMALL, action=9)
    with pytest.raises(ValueError, match=r"optimal=1.0 is invalid"):
        R.render(state, SMALL, optimal=1.0)
    with pytest.raises(ValueError, match="params=None is invalid"):
        R.render(state, None)
    with pytest.raises(ValueError, match="'no_such_policy' is invalid: allowed one of"):
        R.main(["--policy", "no_such_policy"])


def _gif_frames(path):
    with Image.open(path) as im:
        return im.n_frames, im.size


SMALL_SET = ["--set", "num_nodes=8", "--set", "queue_len=4", "--set", "num_sites=2",
             "--set", "episode_len=6"]


@pytest.mark.slow   # the command line, end to end
def test_cli_draws_an_episode_of_a_heuristic(tmp_path):
    out = str(tmp_path / "episode.gif")
    R.main(["--policy", "kube_default", "--out", out, "--steps", "3", "--seed", "1",
            *SMALL_SET])
    assert _gif_frames(out) == (3, (R.FRAME_SHAPE[1], R.FRAME_SHAPE[0]))


@pytest.mark.slow   # the command line, end to end
def test_cli_draws_an_episode_of_a_trained_run(tmp_path):
    """A run directory as the trainers write it (config.json and an orbax `policy`)."""
    run = tmp_path / "run"
    net = vte.SchedulerNet(hidden=8, head_hidden=8)
    obs, _ = vte.reset(jax.random.PRNGKey(0), SMALL)
    variables = jax.jit(net.init)(jax.random.PRNGKey(1), obs)   # one program, not op by op
    stacked = jax.tree_util.tree_map(lambda x: np.asarray(x)[None], variables)   # 1 seed
    os.makedirs(run)
    with open(run / CONFIG_FILE, "w") as f:
        json.dump({"hidden": 8, "seeds": 1,
                   "env": {"num_nodes": 8, "queue_len": 4, "episode_len": 6,
                           "sample_weights": False, "weights": [1.0, 1.0, 1.0]}}, f)
    with checkpoint_manager(str(run)) as mngr:
        mngr.save(0, args=ocp.args.Composite(policy=ocp.args.StandardSave(stacked)))
    out = str(tmp_path / "trained.gif")
    R.main(["--policy", str(run), "--out", out, "--steps", "2", "--set", "num_sites=2"])
    assert _gif_frames(out) == (2, (R.FRAME_SHAPE[1], R.FRAME_SHAPE[0]))
    from vte.cluster.viewer import resolve_policy
    policy, config = resolve_policy(str(run))
    from vte.cluster.viewer import run_params
    assert run_params(config)["weights"] == (1.0, 1.0, 1.0)
    assert 0 <= int(jax.jit(policy)(jax.random.PRNGKey(0), obs, SMALL)) <= SMALL.num_nodes


def test_episode_frames_are_deterministic_per_key():
    key = jax.random.PRNGKey(5)
    a = R.episode_frames(vte.cluster.heuristics.first_fit, SMALL, key, 2)
    b = R.episode_frames(vte.cluster.heuristics.first_fit, SMALL, key, 2)
    assert len(a) == 2 and all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="steps=0 is invalid"):
        R.episode_frames(vte.cluster.heuristics.first_fit, SMALL, key, 0)
