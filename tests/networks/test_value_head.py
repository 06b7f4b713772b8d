"""The PPO value head: created by `init`, zero at start, trainable, absent unless configured."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import networks

BASE = networks.TransformerConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                  d_ff=64, max_len=32)
WITH_VALUE = dataclasses.replace(BASE, value_head=True)
TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, 50, (2, 10)), jnp.int32)
POSITIONS = jnp.broadcast_to(jnp.arange(10), (2, 10))


@functools.cache
def _init(config):
  return networks.Transformer(config).init(jax.random.key(0), TOKENS, POSITIONS)


def test_value_head_starts_at_zero_and_leaves_logits_alone():
  model = networks.Transformer(WITH_VALUE)
  params = _init(WITH_VALUE)
  assert params["params"]["value_head"]["kernel"].shape == (32, 1)
  # Everything else is the model without a value head, initialised identically.
  base = {k: v for k, v in params["params"].items() if k != "value_head"}
  assert jax.tree.structure(base) == jax.tree.structure(_init(BASE)["params"])
  logits, values = jax.jit(functools.partial(model.apply, method=model.logits_and_values))(
      params, TOKENS, POSITIONS)
  assert values.shape == (2, 10) and values.dtype == jnp.float32
  np.testing.assert_array_equal(values, 0.0)
  expected, _ = networks.Transformer(BASE).apply({"params": base}, TOKENS, POSITIONS)
  np.testing.assert_allclose(logits, expected, atol=1e-6, rtol=0)  # jitted vs not: rounding


def test_value_head_learns_a_target():
  model = networks.Transformer(WITH_VALUE)
  target = jnp.linspace(-1.0, 1.0, 10)[None].repeat(2, axis=0)

  def loss(params):
    _, values = model.apply(params, TOKENS, POSITIONS, method=model.logits_and_values)
    return jnp.mean((values - target) ** 2)

  params = _init(WITH_VALUE)
  grad_fn = jax.jit(jax.value_and_grad(loss))
  first, grads = grad_fn(params)
  assert float(jnp.abs(grads["params"]["value_head"]["kernel"]).max()) > 0
  for _ in range(20):  # gradient descent on the value head alone, as a critic warm-up would
    value, grads = grad_fn(params)
    head = jax.tree.map(lambda p, g: p - 0.1 * g, params["params"]["value_head"],
                        grads["params"]["value_head"])
    params = {"params": {**params["params"], "value_head": head}}
  assert float(value) < 0.5 * float(first)


def test_values_without_a_value_head_is_an_error():
  model = networks.Transformer(BASE)
  with pytest.raises(ValueError, match="no value head"):
    model.apply(_init(BASE), TOKENS, POSITIONS, method=model.logits_and_values)
