"""Network layers every environment's policy shares: `Dense`, a `flax.linen.Dense` whose
backward pass is written out (`_affine`), and `masked_logits`, which gives invalid
actions probability 0. Cluster-v0's `vte.cluster.network` and OpenB-v0's
`vte.openb.network` build on them.
"""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

_MASKED = jnp.finfo(jnp.float32).min


@jax.custom_vjp
def _affine(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """`x @ kernel + bias` over x's last axis, with a backward pass written out.

    XLA's own backward of a per-node layer (x of shape (B, N, in)) on CPU transposes the
    output gradient before the kernel's product and fuses the bias gradient's reduction
    over the B * N rows into elementwise loops. Here each of the three gradients is one
    matrix product over the flattened rows (the bias gradient a product with a vector of
    ones): the same gradients up to float rounding. On a 2-core CPU the whole network's
    gradient step is 1.2x as fast, imitation's training 1.2x and PPO's 1.13x
    (both variants alternated in one run, 2026-12-01; `docs/history.md`).
    Reverse mode only, like every `jax.custom_vjp`: `jax.jvp` through it is not
    supported."""
    return x @ kernel + bias


def _affine_fwd(x, kernel, bias):
    return _affine(x, kernel, bias), (x, kernel)


def _affine_bwd(res, g):
    x, kernel = res
    rows_x = x.reshape(-1, x.shape[-1])
    rows_g = g.reshape(-1, g.shape[-1])
    d_kernel = lax.dot_general(rows_x, rows_g, (((0,), (0,)), ((), ())))
    d_bias = jnp.ones((rows_g.shape[0],), g.dtype) @ rows_g
    return g @ kernel.T, d_kernel, d_bias


_affine.defvjp(_affine_fwd, _affine_bwd)


class Dense(nn.Module):
    """`flax.linen.Dense` (the same parameters, initialisers and outputs, so checkpoints
    interchange) whose backward pass is `_affine`'s."""

    features: int
    use_bias: bool = True
    kernel_init: Callable = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features),
                            jnp.float32)
        bias = (self.param("bias", nn.initializers.zeros_init(), (self.features,),
                           jnp.float32) if self.use_bias
                else jnp.zeros((self.features,), jnp.float32))
        return _affine(x.astype(jnp.float32), kernel, bias)


def masked_logits(logits: jax.Array, action_mask: jax.Array) -> jax.Array:
    """Infeasible actions get the least float32, so softmax gives them probability 0."""
    return jnp.where(action_mask, logits, _MASKED)
