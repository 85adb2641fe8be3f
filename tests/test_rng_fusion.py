"""The cheap random words of `vte.rng` and the performance helpers of `vte.cluster.fusion`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from vte import rng
from vte.cluster import fusion


def test_words_are_uniform():
    u = np.asarray(rng.to_uniform(rng.words(jnp.asarray([7, 9], jnp.uint32), rng.STEP_NODES,
                                            (200_000,))))
    assert 0.0 <= u.min() and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    counts = np.histogram(u, bins=64, range=(0, 1))[0]
    assert stats.chisquare(counts).pvalue > 1e-3
    noise = np.asarray(rng.unit_noise(rng.words(jnp.uint32(3), 1, (200_000,))))
    assert abs(noise.mean()) < 0.01 and abs(noise.var() - 1.0) < 0.01


def test_streams_seeds_and_both_seed_halves_give_independent_words():
    seed = jnp.asarray([1, 2], jnp.uint32)
    n = 100_000
    draws = {
        "stream A": rng.words(seed, rng.STEP_NODES, (n,)),
        "stream B": rng.words(seed, rng.STEP_ARRIVALS, (n,)),
        "other first word": rng.words(jnp.asarray([3, 2], jnp.uint32), rng.STEP_NODES, (n,)),
        "other second word": rng.words(jnp.asarray([1, 5], jnp.uint32), rng.STEP_NODES, (n,)),
    }
    u = {k: np.asarray(rng.to_uniform(v), np.float64) for k, v in draws.items()}
    names = list(u)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert abs(np.corrcoef(u[a], u[b])[0, 1]) < 0.02, (a, b)
            assert np.mean(np.asarray(draws[a]) == np.asarray(draws[b])) < 1e-3, (a, b)
    # Reset's words are the same function of the key's 64-bit seed.
    key = jax.random.PRNGKey(11)
    np.testing.assert_array_equal(rng.key_words(key, rng.RESET_NODES, (4, 3)),
                                  rng.words(rng.seed_from_key(key), rng.RESET_NODES, (4, 3)))
    assert rng.seed_from_key(key).shape == (2,)


def test_words_are_deterministic_and_work_under_jit_and_vmap():
    seeds = jnp.asarray([[1, 2], [3, 4], [5, 6]], jnp.uint32)
    batched = jax.jit(jax.vmap(lambda s: rng.words(s, 5, (8,))))(seeds)
    for i in range(3):
        np.testing.assert_array_equal(batched[i], rng.words(seeds[i], 5, (8,)))


TREE = {"a": jnp.arange(6.0).reshape(2, 3), "b": jnp.asarray([1, 2, 3], jnp.int32)}


def test_categorical_draws_the_softmax_and_never_a_masked_action():
    """`rng.categorical`: the frequencies of softmax(logits) (a chi-square test), no draw
    of a -inf logit, one row per key under vmap, deterministic per key, and the documented
    edges (a single allowed action; every action masked: 0, as jax.random.categorical)."""
    logits = jnp.asarray([[0.0, 1.0, -jnp.inf, 2.0, -1.0, -jnp.inf],
                          [-jnp.inf, -jnp.inf, -jnp.inf, 5.0, -jnp.inf, -jnp.inf],
                          [-jnp.inf] * 6,
                          [30.0, -30.0, 0.0, 29.0, 10.0, 30.0]], jnp.float32)
    n = 100_000
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    draws = np.asarray(jax.jit(jax.vmap(rng.categorical, in_axes=(0, None)))(keys, logits))
    assert draws.shape == (n, 4) and draws.dtype == np.int32
    for row in (0, 3):
        probs = np.asarray(jax.nn.softmax(logits[row]), np.float64)
        counts = np.bincount(draws[:, row], minlength=6)
        assert counts[probs == 0].sum() == 0, (row, counts)
        seen = probs > 1e-3
        assert counts[~seen].sum() <= 5                      # e^-30 and e^-20 of the total
        expected = probs[seen] / probs[seen].sum() * counts[seen].sum()
        expected *= counts[seen].sum() / expected.sum()            # float64 rounding
        assert stats.chisquare(counts[seen], expected).pvalue > 1e-3, (row, counts)
    assert (draws[:, 1] == 3).all() and (draws[:, 2] == 0).all()
    # A batch of logits under one key: one uniform per row, rows drawn independently.
    batch = jnp.tile(logits[:1], (n, 1))
    one_key = np.asarray(jax.jit(rng.categorical)(jax.random.PRNGKey(1), batch))
    counts = np.bincount(one_key, minlength=6)
    probs = np.asarray(jax.nn.softmax(logits[0]), np.float64)
    assert counts[probs == 0].sum() == 0
    expected = probs[probs > 0] / probs[probs > 0].sum() * n
    assert stats.chisquare(counts[probs > 0], expected * n / expected.sum()).pvalue > 1e-3
    np.testing.assert_array_equal(one_key, rng.categorical(jax.random.PRNGKey(1), batch))
    assert not np.array_equal(one_key, rng.categorical(jax.random.PRNGKey(2), batch))
    # 65 actions (64 nodes and defer), two in five masked: the prefix sums a deep tree,
    # whose rounding may leave them decreasing by up to ~1e-7 of the total; the draws
    # still follow the softmax and never take a masked action.
    k_logit, k_mask = jax.random.split(jax.random.PRNGKey(3))
    wide = jnp.where(jax.random.uniform(k_mask, (65,)) < 0.4, -jnp.inf,
                     2.0 * jax.random.normal(k_logit, (65,)))
    draws = np.asarray(jax.jit(rng.categorical)(jax.random.PRNGKey(4), jnp.tile(wide, (n, 1))))
    probs = np.asarray(jax.nn.softmax(wide), np.float64)
    counts = np.bincount(draws, minlength=65)
    assert counts[probs == 0].sum() == 0
    big = probs * n >= 5                     # the chi-square's bins, the rest pooled in one
    assert big.sum() >= 20
    observed, expected = counts[big], probs[big] * n
    if probs[~big].sum() * n >= 5:
        observed = np.append(observed, counts[~big].sum())
        expected = np.append(expected, probs[~big].sum() * n)
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3


def test_materialize_is_the_identity_under_jit_vmap_and_nested_vmap():
    def f(tree):
        out = fusion.materialize(jax.tree_util.tree_map(lambda x: x * 2, tree))
        return jax.tree_util.tree_map(lambda x: x + 1, out)

    expected = jax.tree_util.tree_map(lambda x: x * 2 + 1, TREE)
    for fn in (f, jax.jit(f)):
        jax.tree_util.tree_map(np.testing.assert_array_equal, fn(TREE), expected)
    stacked = jax.tree_util.tree_map(lambda x: jnp.stack([x, x + 1]), TREE)
    once = jax.jit(jax.vmap(f))(stacked)
    twice = jax.jit(jax.vmap(jax.vmap(f)))(jax.tree_util.tree_map(lambda x: x[None], stacked))
    want = jax.tree_util.tree_map(lambda x: x * 2 + 1, stacked)
    jax.tree_util.tree_map(np.testing.assert_array_equal, once, want)
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_array_equal(x[0], y), twice, want)
    # The batched rule keeps a real conditional: the predicate is not batched.
    text = jax.jit(jax.vmap(f)).lower(stacked).as_text()
    assert "case" in text or "conditional" in text


@pytest.mark.parametrize("on", [True, False])
def test_lookup_and_materialize_give_the_same_values_switched_on_or_off(on, monkeypatch):
    monkeypatch.setattr(fusion, "HINTS", {})
    fusion.set_hints(jax.default_backend(), lookup=on, materialize=on)
    assert fusion.enabled("lookup") is on and fusion.enabled("materialize") is on
    table = [10.0, 20.0, 30.0, 40.0]
    index = jnp.asarray([[3, 0], [1, 2]])
    np.testing.assert_array_equal(jax.jit(fusion.lookup, static_argnums=0)(tuple(table), index),
                                  np.asarray(table)[np.asarray(index)])
    np.testing.assert_array_equal(jax.vmap(lambda i: fusion.lookup(table, i))(index),
                                  np.asarray(table)[np.asarray(index)])
    jax.tree_util.tree_map(np.testing.assert_array_equal,
                           jax.jit(fusion.materialize)(TREE), TREE)


def test_lookup_selects_exactly_rows_booleans_and_entry_zero_out_of_range():
    """`lookup` is `table[index]` bit for bit: floats (inf and -inf among them), integers,
    booleans and whole rows of a (T, C) table; an index outside [0, T) gives entry 0."""
    floats = np.array([0.1, np.inf, -np.inf, 3e38, -7.5], np.float32)
    index = jnp.asarray([[0, 1, 2], [3, 4, 4]])
    np.testing.assert_array_equal(fusion.lookup(floats, index), floats[np.asarray(index)])
    ints = np.array([7, -3, 2**30], np.int32)
    got = jax.jit(jax.vmap(fusion.lookup, in_axes=(None, 0)))(ints, jnp.asarray([2, 0, 1]))
    assert got.dtype == jnp.int32 and list(got) == [2**30, 7, -3]
    flags = np.array([True, False, True])
    assert list(fusion.lookup(flags, jnp.asarray([1, 2, 0]))) == [False, True, True]
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(fusion.lookup(rows, jnp.asarray([3, 1])), rows[[3, 1]])
    np.testing.assert_array_equal(fusion.lookup(floats, jnp.asarray([-1, 5, 99])),
                                  np.full(3, floats[0]))


def test_stream_salts_computed_while_tracing_equal_the_traced_hash():
    """`words` salts each stream with `hash32` of a constant, now hashed in NumPy while
    tracing: the same word as the traced hash gives, for every stream and seed word."""
    from vte import rng
    streams = [getattr(rng, n) for n in dir(rng) if n.startswith(("RESET_", "STEP_"))]
    for stream in streams + [rng.SAMPLE, 0, 2**31 + 5]:
        for lane in (1, 2):
            traced = rng.hash32(jnp.uint32(stream) * rng._GOLDEN + jnp.uint32(lane))
            assert int(traced) == int(rng._salt(stream, lane)), (stream, lane)
