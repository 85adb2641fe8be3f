"""Cheap counter-based random words for the inside of `step`.

`jax.random` costs tens of nanoseconds per number on a CPU; a step that drew several
numbers per node would spend most of its time there. `step` therefore draws one
64-bit seed (two 32-bit words, `seed_from_key`) from its key and expands it with an
integer hash (`lowbias32`, a few multiply / xor-shift operations per word) into all the
words it needs: per-node noise, failures, arrivals and the attributes of new requests.
Each word mixes both halves of the seed, so two steps draw the same words only if 64
bits of their keys agree (one 32-bit word would repeat a step's draws within ~65k
environment-steps, by the birthday bound). The words are a deterministic function of
the step key, so a step stays reproducible per key. Reset draws its scenario the same
way (`key_words`): it needs 17 words per node, which from the threefry generator of
`jax.random` cost many steps' worth (see vte/cluster/MODEL.md, section 2), and under a vmap
every environment resets in the same step.
"""

import jax
import jax.numpy as jnp
import numpy as np

# NumPy scalars, not JAX arrays: importing vte must not start a JAX backend (multi-host
# training calls jax.distributed.initialize after importing).
_GOLDEN = np.uint32(0x9E3779B9)
_M1 = np.uint32(0x7FEB352D)
_M2 = np.uint32(0x846CA68B)



# Seeds a command line accepts: jax.random.PRNGKey keeps the low 32 bits of a seed (without
# x64), so a wider or negative seed would give another seed's key silently.
SEED_LIMIT = 2**32

# Every random stream, declared once. Reset draws from its key (`key_words`), step from
# its one seed word (`words`); within each, a stream id keeps draws apart.
RESET_NODES = 1        # scenario: node attributes
RESET_SITES = 2        # scenario: site positions
RESET_LOAD = 3         # scenario: initial background load
RESET_QUEUE = 4        # scenario: the initial queue and the first arrivals
RESET_WEIGHTS = 5      # scenario: the episode's objective weights
STEP_NODES = 0x11      # step: failures, repairs and the background load's next value
STEP_ARRIVALS = 0x22   # step: how many requests arrive
STEP_REQUESTS = 0x33   # step: the arriving requests
STEP_TWIN = 0x7417     # step: which nodes report, and the twin's noise
SAMPLE = 0x5A3         # `categorical`: an agent's action

def _lowbias32(x):
    """The lowbias32 rounds on a uint32 array of JAX or NumPy (wrapping arithmetic): the one
    formula of `hash32` and of the stream salts computed while tracing."""
    x = x ^ (x >> 16)
    x = x * _M1
    x = x ^ (x >> 15)
    x = x * _M2
    return x ^ (x >> 16)


def hash32(x: jax.Array) -> jax.Array:
    """lowbias32 integer hash, uint32 -> uint32, a bijection with good avalanche."""
    return _lowbias32(x.astype(jnp.uint32))


def _hash32_const(x: int) -> np.uint32:
    """`hash32` of a constant, computed while tracing (in NumPy, on a one-element array,
    whose uint32 arithmetic wraps silently): the same word, and no operations in the
    program."""
    return _lowbias32(np.array([int(x) & 0xFFFFFFFF], np.uint32))[0]


def _salt(stream: int, lane: int) -> np.uint32:
    """The constant word that keeps stream `stream`'s draws apart (lane 1: the seed's first
    word, lane 2: its second)."""
    return _hash32_const(int(stream) * int(_GOLDEN) + lane)


def words(seed: jax.Array, stream: int, shape: tuple[int, ...]) -> jax.Array:
    """uint32 words of `shape`, independent per (seed, stream, position).

    `seed`: () uint32, one word, or (2,) uint32, a 64-bit seed (`seed_from_key`), whose
    second word is mixed into every word."""
    seed = jnp.asarray(seed)
    if seed.shape == (2,):
        mix = hash32(seed[1].astype(jnp.uint32) ^ _salt(stream, 2))
        return hash32(words(seed[0], stream, shape) ^ mix)
    base = hash32(seed.astype(jnp.uint32) ^ _salt(stream, 1))
    size = 1
    for s in shape:
        size *= s
    idx = jnp.arange(size, dtype=jnp.uint32).reshape(shape)
    return hash32(base + idx * _GOLDEN)


def key_words(key: jax.Array, stream: int, shape: tuple[int, ...]) -> jax.Array:
    """uint32 words of `shape`, independent per (key, stream, position), from the 64-bit
    seed of the key: two keys give the same words only if 64 bits of them agree (one
    32-bit seed would repeat a scenario within ~65k environments)."""
    return words(seed_from_key(key), stream, shape)


def to_uniform(w: jax.Array) -> jax.Array:
    """uint32 words -> float32 uniforms in [0, 1), 24 bits of resolution."""
    return (w >> 8).astype(jnp.float32) * jnp.float32(1.0 / (1 << 24))


def unit_noise(w: jax.Array) -> jax.Array:
    """uint32 words -> float32 uniform noise of mean 0 and variance 1, in [-sqrt 3, sqrt 3)."""
    return (2.0 * to_uniform(w) - 1.0) * jnp.float32(1.7320508)


def seed_from_key(key: jax.Array) -> jax.Array:
    """(2,) uint32, a 64-bit seed drawn from a JAX key (raw or typed), for `words`."""
    return jax.random.bits(key, (2,), jnp.uint32)


def categorical(key: jax.Array, logits: jax.Array) -> jax.Array:
    """A sample of softmax(`logits`) over the last axis, by its inverse cumulative
    distribution: one uniform (24 bits, `key_words`) per sample instead of the Gumbel-max
    of `jax.random.categorical`, which draws a number and takes two logarithms per action.

    logits: (..., A) float, finite or -inf (-inf: never drawn; mask actions with
    `jnp.where(mask, logits, -jnp.inf)`; a NaN or +inf logit gives an unspecified action,
    not necessarily that one); key: a JAX key (raw or typed). Returns (...)
    int32 in [0, A). The same distribution as `jax.random.categorical` up to float32
    rounding (an action whose probability is below ~1e-7 of the total may never be drawn),
    not the same draws. Every sample is an action of finite logit: where rounding would
    give another, the sample is the most likely action; with every logit -inf, 0 (as
    `jax.random.categorical`). Deterministic per key; under vmap give each row its own key.
    """
    logits = jnp.asarray(logits, jnp.float32)
    u = to_uniform(key_words(key, SAMPLE, logits.shape[:-1]))
    top = jnp.max(logits, axis=-1, keepdims=True)
    p = jnp.exp(logits - jnp.where(jnp.isfinite(top), top, 0.0))
    # A tree of sums: on a CPU `jnp.cumsum` lowers to a reduce-window, 1.3-2.7x slower
    # alone at 4096 x 65 (docs/history.md). The same prefix sums up to float32
    # rounding, which may leave them decreasing by ~1e-7 of the total: nothing below
    # relies on their order (a hit needs p > 0; with no hit, the most likely action).
    cum = jax.lax.associative_scan(jnp.add, p, axis=-1)
    hit = (cum > u[..., None] * cum[..., -1:]) & (p > 0)
    mode = jnp.argmax(p >= 1.0, axis=-1)   # p = 1 exactly at the largest logit; a boolean
    #                                        argmax costs a fraction of a float one on a CPU
    return jnp.where(jnp.any(hit, axis=-1), jnp.argmax(hit, axis=-1), mode).astype(jnp.int32)
