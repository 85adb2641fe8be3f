"""The policy network: shapes, masking, permutation equivariance, any number of nodes,
and that it learns (the loss falls on a fixed batch)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import vte
from vte.cluster.network import SchedulerNet, make_policy
from tests.conftest import SMALL

NET = SchedulerNet(hidden=16, head_hidden=16)
APPLY = jax.jit(NET.apply)


@pytest.fixture(scope="module")
def data():
    """64 fresh states of the small configuration, their observations and optimal actions."""
    keys = jax.random.split(jax.random.PRNGKey(0), 64)
    obs, states = jax.jit(jax.vmap(vte.reset, (0, None)))(keys, SMALL)
    labels = jax.jit(jax.vmap(vte.optimal_action, (0, None)))(states, SMALL)
    return obs, labels


def _one(tree, i=0):
    return jax.tree_util.tree_map(lambda x: x[i], tree)


def _resize(obs, idx):
    """Observations of a cluster made of the nodes `idx` (repeats allowed): any size."""
    idx = np.asarray(idx)
    mask = jnp.concatenate([obs.action_mask[:, idx], obs.action_mask[:, -1:]], axis=-1)
    return obs.replace(nodes=obs.nodes[:, idx], action_mask=mask)


def test_shapes_mask_and_value(data):
    obs, _ = data
    variables = NET.init(jax.random.PRNGKey(0), _one(obs))
    logits, value = APPLY(variables, obs)
    assert logits.shape == (64, SMALL.num_nodes + 1) and value.shape == (64,)
    single_logits, single_value = APPLY(variables, _one(obs))
    np.testing.assert_allclose(single_logits, logits[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(single_value, value[0], rtol=1e-5, atol=1e-5)
    masked = ~np.asarray(obs.action_mask)
    assert masked.any(), "the sample should hold infeasible actions"
    assert np.all(np.asarray(logits)[masked] == np.finfo(np.float32).min)
    probs = jax.nn.softmax(logits)
    assert np.all(np.asarray(probs)[masked] == 0.0)
    assert np.all(np.isfinite(np.asarray(logits)[~masked])) and np.all(np.isfinite(value))


def test_policy_actions_are_feasible_under_jit_and_vmap(data):
    obs, _ = data
    variables = NET.init(jax.random.PRNGKey(1), _one(obs))
    keys = jax.random.split(jax.random.PRNGKey(2), 64)
    for greedy in (True, False):
        policy = jax.jit(jax.vmap(make_policy(NET, variables, greedy), (0, 0, None)))
        actions = np.asarray(policy(keys, obs, SMALL))
        assert actions.dtype == np.int32
        assert np.all(np.asarray(obs.action_mask)[np.arange(64), actions])


def test_same_parameters_for_any_number_of_nodes(data):
    obs, _ = data
    variables = NET.init(jax.random.PRNGKey(0), _one(obs))
    for n in (1, 3, 40):
        logits, value = APPLY(variables, _resize(obs, np.arange(n) % SMALL.num_nodes))
        assert logits.shape == (64, n + 1) and value.shape == (64,)
        assert np.all(np.isfinite(np.asarray(value)))


def test_permutation_equivariant_over_nodes(data):
    obs, _ = data
    variables = NET.init(jax.random.PRNGKey(3), _one(obs))
    perm = np.random.default_rng(0).permutation(SMALL.num_nodes)
    logits, value = APPLY(variables, obs)
    logits_p, value_p = APPLY(variables, _resize(obs, perm))
    np.testing.assert_allclose(logits_p[:, :-1], logits[:, perm], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(logits_p[:, -1], logits[:, -1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(value_p, value, rtol=1e-4, atol=1e-4)


def test_loss_falls_on_a_fixed_batch(data):
    """Cross-entropy to the optimal actions of a fixed batch of states drops when trained."""
    obs, labels = data
    variables = NET.init(jax.random.PRNGKey(5), _one(obs))
    tx = optax.adam(1e-2)

    def loss_fn(v):
        logits, _ = NET.apply(v, obs)
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], -1).mean()

    @jax.jit
    def train(v):
        def sgd(carry, _):
            v, o = carry
            loss, g = jax.value_and_grad(loss_fn)(v)
            u, o = tx.update(g, o, v)
            return (optax.apply_updates(v, u), o), loss
        return jax.lax.scan(sgd, (v, tx.init(v)), None, 60)[1]

    losses = np.asarray(train(variables))
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses


def test_the_written_backward_is_flax_dense_with_the_same_gradients(data):
    """`vte.cluster.network.Dense` is `flax.linen.Dense`: the same parameters (checkpoints
    interchange), outputs and gradients, also vmapped over stacked parameters (--seeds)
    and through a per-node (B, N, F) input."""
    import flax.linen as nn
    obs, labels = data
    ours, theirs = NET, SchedulerNet(hidden=16, head_hidden=16, dense=nn.Dense)
    variables = theirs.init(jax.random.PRNGKey(1), _one(obs))
    assert (jax.tree_util.tree_structure(ours.init(jax.random.PRNGKey(1), _one(obs)))
            == jax.tree_util.tree_structure(variables))
    np.testing.assert_array_equal(*(np.asarray(net.apply(variables, obs)[0])
                                    for net in (ours, theirs)))

    def grads(net):
        def loss(v):
            logits, value = net.apply(v, obs)
            ce = -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], -1)
            return ce.mean() + jnp.square(value).mean()
        return jax.jit(jax.grad(loss))(variables)

    # The flag columns' log rows of the first layers get their gradient through the fold
    # (`LogDense`), a difference of terms about 4.6x the gradient's own size, so the two
    # summation orders agree to float32 rounding of those terms: atol relative to the leaf.
    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()) + 1e-7)

    for a, b in zip(*(jax.tree_util.tree_leaves(grads(n)) for n in (ours, theirs))):
        close(a, b)
        assert np.all(np.isfinite(a))

    # Stacked parameters, as `--seeds` trains them: one gradient per seed.
    stacked = jax.tree_util.tree_map(lambda x: jnp.stack([x, 2 * x]), variables)

    def seed_grads(net):
        def loss(v):
            logits, value = net.apply(v, obs)
            return jax.nn.logsumexp(logits, -1).mean() + value.mean()
        return jax.jit(jax.vmap(jax.grad(loss)))(stacked)

    for a, b in zip(*(jax.tree_util.tree_leaves(seed_grads(n)) for n in (ours, theirs))):
        close(a, b)


def test_first_layers_fold_the_logs_of_flag_columns_exactly(data):
    """`LogDense` (node_in, queue_enc) is `Dense` of `_with_logs(x)` with the same
    parameters: the same outputs and gradients on observations, whose flag columns are 0
    or 1, while it takes logs of the other columns only."""
    from vte.cluster.network import LogDense, NODE_FLAGS, REQUEST_FLAGS, _with_logs
    obs, _ = data
    assert len(NODE_FLAGS[0]) == 16 and len(REQUEST_FLAGS[0]) == 29
    for x, columns in ((obs.nodes, NODE_FLAGS), (obs.queue, REQUEST_FLAGS)):
        assert set(np.unique(np.asarray(x[..., list(columns[0])]))) <= {0.0, 1.0}
        layer = LogDense(8, columns)
        variables = layer.init(jax.random.PRNGKey(2), x)
        # a bias that is not zero, so that the fold into it is checked too
        variables = {"params": {**variables["params"],
                                "bias": jnp.linspace(-1.0, 1.0, 8)}}

        def plain(v):
            p = v["params"]
            return _with_logs(x) @ p["kernel"] + p["bias"]

        np.testing.assert_allclose(layer.apply(variables, x), plain(variables),
                                   rtol=1e-5, atol=1e-5)
        g_fold = jax.grad(lambda v: jnp.sin(layer.apply(v, x)).sum())(variables)
        g_plain = jax.grad(lambda v: jnp.sin(plain(v)).sum())(variables)
        for a, b in zip(jax.tree_util.tree_leaves(g_fold), jax.tree_util.tree_leaves(g_plain)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError, match="34 input columns"):
        LogDense(8, NODE_FLAGS).init(jax.random.PRNGKey(0), obs.nodes[..., :34])
