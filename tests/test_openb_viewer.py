"""Pictures of the OpenB cluster replay: size, determinism, what changes them, the node
limit, edge clusters (empty, full, no GPU) and bad input."""

import jax
import numpy as np
import pytest

from vte.openb import env as oenv
from vte.openb import viewer as V
from vte.openb.cluster import Pod, Spec, State
from vte.openb.trace import load_nodes, load_pods
from vte.render import FRAME_SHAPE


def _parts(state):
    """(Spec, State) of an OpenB EnvState, whichever field holds which."""
    fields = (state.cluster, state.nodes)
    return (next(v for v in fields if isinstance(v, Spec)),
            next(v for v in fields if isinstance(v, State)))


@pytest.fixture(scope="module")
def replay():
    """A 16-node replay: the empty cluster, and the cluster after a few placements."""
    nodes = load_nodes("gpu")
    pods = load_pods("default", nodes)
    params = oenv.make_params(nodes, pods, seeds=[0], subset=16)
    obs, state = jax.jit(oenv.reset)(jax.random.PRNGKey(0), params)
    empty = state
    step = jax.jit(oenv.step)
    for _ in range(6):
        action = np.int32(np.argmax(np.asarray(obs.action_mask)))
        obs, state, *_ = step(jax.random.PRNGKey(1), state, action, params)
    return dict(nodes=nodes, params=params, empty=empty, later=state, obs=obs)


def _draw(replay, which="later", **kw):
    state = replay[which]
    spec, st = _parts(state)
    pod = oenv.current_pod(state, replay["params"])
    return spec, st, pod, V.frame_cluster(spec, st, pod, model_names=replay["nodes"].models, **kw)


def _texts(fig):
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def test_frame_size_and_determinism(replay):
    spec, st, pod, px = _draw(replay)
    assert px.shape == FRAME_SHAPE + (3,) == (720, 1280, 3) and px.dtype == np.uint8
    assert px.std() > 10                                          # something is drawn
    assert np.array_equal(px, _draw(replay)[3])                   # same state, same pixels
    assert not np.array_equal(px, _draw(replay, "empty")[3])      # placements show


def test_action_and_reference_change_the_picture(replay):
    n = replay["params"].num_nodes
    action = int(np.argmax(np.asarray(replay["obs"].action_mask)))
    spec, st, pod, none = _draw(replay)
    chosen = _draw(replay, action=action)[3]
    assert not np.array_equal(none, chosen)
    assert not np.array_equal(chosen, _draw(replay, action=action, reference=(action + 1) % n)[3])
    fig = V.render_cluster(spec, st, pod, action=n, reference=n)
    assert sum("cannot place" in t for t in _texts(fig)) >= 1


def test_more_nodes_than_max_nodes_are_announced(replay):
    spec, st = _parts(replay["later"])
    fig = V.render_cluster(spec, st, max_nodes=8, action=12)
    texts = _texts(fig)
    assert any("showing 8 of 16 nodes" in t for t in texts)
    assert any("node 12 (not shown)" in t for t in texts)
    assert V.to_rgb(fig).shape == (720, 1280, 3)
    assert not any("showing" in t for t in _texts(V.render_cluster(spec, st)))


def test_edge_clusters_draw(replay):
    spec, st = _parts(replay["empty"])
    full = st.replace(gpu_free=np.zeros_like(np.asarray(st.gpu_free)),
                      cpu_free=np.zeros_like(np.asarray(st.cpu_free)),
                      mem_free=np.zeros_like(np.asarray(st.mem_free)),
                      frag=np.zeros_like(np.asarray(st.frag)))
    no_gpu = spec.replace(num_gpus=np.zeros_like(np.asarray(spec.num_gpus)),
                          model=np.full_like(np.asarray(spec.model), -1),
                          gpu_exists=np.zeros_like(np.asarray(spec.gpu_exists)))
    one_spec, one_st = jax.tree_util.tree_map(lambda x: np.asarray(x)[..., :1] if np.ndim(x) else x,
                                              (spec.replace(typical=None), st))
    one_spec = one_spec.replace(typical=spec.typical)                  # a 1-node cluster
    for sp, s in ((spec, st), (spec, full), (no_gpu, st), (one_spec, one_st)):
        fig = V.render_cluster(sp, s)
        assert V.to_rgb(fig).shape == (720, 1280, 3)
        assert not any("nan" in t.lower() for t in _texts(fig))
    assert any("100.0% of GPUs" in t for t in _texts(V.render_cluster(spec, full)))


def test_bad_input_is_named(replay):
    spec, st = _parts(replay["later"])
    n = replay["params"].num_nodes
    with pytest.raises(ValueError, match=rf"action=17 is invalid.*\[0, N={n}\]"):
        V.render_cluster(spec, st, action=n + 1)
    with pytest.raises(ValueError, match=r"reference=-1 is invalid"):
        V.render_cluster(spec, st, reference=-1)
    with pytest.raises(ValueError, match=r"action=1.0 is invalid"):
        V.render_cluster(spec, st, action=1.0)
    with pytest.raises(ValueError, match=r"max_nodes=0 is invalid: allowed an integer >= 1"):
        V.render_cluster(spec, st, max_nodes=0)
    with pytest.raises(ValueError, match=r"spec of type State is invalid"):
        V.render_cluster(st, st)
    with pytest.raises(ValueError, match=r"model_names=.*names 1 models"):
        V.render_cluster(spec, st, model_names=("G2",))
    batch = jax.tree_util.tree_map(lambda x: np.stack([x, x]), st)
    with pytest.raises(ValueError, match=r"st.gpu_free of shape \(2, 8, 16\) is invalid"):
        V.render_cluster(spec, batch)
    assert isinstance(oenv.current_pod(replay["later"], replay["params"]), Pod)
