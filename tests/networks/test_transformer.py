"""Tests of the decoder transformer: cache consistency, causality, RoPE, config validation."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import networks
from rlagents.networks import transformer as transformer_lib

TINY = networks.TransformerConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                  d_ff=64, max_len=32)


class _Jitted:
  """The model with a jitted `apply`: eager dispatch is slow, and one jit per config lets the
  tests share compilations (they use few shapes on purpose)."""

  def __init__(self, config):
    self.module = networks.Transformer(config)
    self.apply = jax.jit(self.module.apply)


@functools.cache
def _init(config):
  """The model and random parameters: norm scales near 1, everything else small noise.

  Built from `eval_shape` of `init`: non-trivial scales and biases (so that a wrong parameter
  path cannot hide), without compiling `init` for every config.
  """
  model = _Jitted(config)
  tokens = jnp.zeros((1, 4), jnp.int32)
  shapes = jax.eval_shape(model.module.init, jax.random.key(0), tokens, tokens)
  rng = np.random.default_rng(0)

  def draw(path, shape):
    noise = 0.2 * rng.standard_normal(shape.shape)
    is_scale = jax.tree_util.keystr(path).endswith("['scale']")
    return jnp.asarray(1.0 + noise if is_scale else noise, shape.dtype)

  return model, jax.tree_util.tree_map_with_path(draw, shapes)


def _arange_positions(batch, length):
  return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))


@pytest.mark.parametrize("overrides", [
    {},  # grouped-query attention, tied embeddings
    {"n_kv_heads": 4, "attention_bias": True},  # multi-head attention, Qwen2 biases
    {"n_kv_heads": 1, "tie_embeddings": False},  # multi-query, separate LM head
])
def test_cached_decoding_matches_full_forward(overrides):
  config = dataclasses.replace(TINY, **overrides)
  model, params = _init(config)
  batch, length = 3, 12
  tokens = jax.random.randint(jax.random.key(2), (batch, length), 0, config.vocab_size)
  full_logits, _ = model.apply(params, tokens, _arange_positions(batch, length))

  # Prefill positions 0..3 of every row in 2-token chunks, then go on from a different position
  # per row (rows 0 and 1 rewrite filled slots with the same tokens): another 2-token chunk,
  # then one token at a time, each row at its own position.
  cache = networks.init_cache(config, batch, 16)
  for start in (0, 2):
    _, cache = model.apply(params, tokens[:, start:start + 2],
                           _arange_positions(batch, 2) + start, cache)
  starts = jnp.array([1, 3, 4])
  rows = jnp.arange(batch)[:, None]
  positions = starts[:, None] + jnp.arange(2)
  logits, cache = model.apply(params, tokens[rows, positions], positions, cache)
  np.testing.assert_allclose(logits, full_logits[rows, positions], atol=1e-5)
  for step in range(2, 8):
    positions = starts[:, None] + step
    logits, cache = model.apply(params, tokens[rows, positions], positions, cache)
    np.testing.assert_allclose(logits, full_logits[rows, positions], atol=1e-5)


def test_forward_without_cache_returns_prefill_cache():
  model, params = _init(TINY)
  tokens = jax.random.randint(jax.random.key(2), (3, 2), 0, TINY.vocab_size)
  _, prefill = model.apply(params, tokens, _arange_positions(3, 2))
  _, incremental = model.apply(params, tokens, _arange_positions(3, 2),
                               networks.init_cache(TINY, 3, 2))
  assert len(prefill.k) == TINY.n_layers
  assert prefill.k[0].shape == (3, TINY.n_kv_heads, TINY.head_dim, 2)  # keys: slots last
  assert prefill.v[0].shape == (3, TINY.n_kv_heads, 2, TINY.head_dim)
  # Float32 rounding: the cached path sums the scores of a decode-sized query elementwise.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), prefill, incremental)


def test_causal_logits_ignore_future_tokens():
  model, params = _init(TINY)
  tokens = jax.random.randint(jax.random.key(2), (3, 12), 0, TINY.vocab_size)
  changed = tokens.at[:, 6:].set((tokens[:, 6:] + 1) % TINY.vocab_size)
  logits, _ = model.apply(params, tokens, _arange_positions(3, 12))
  changed_logits, _ = model.apply(params, changed, _arange_positions(3, 12))
  np.testing.assert_allclose(logits[:, :6], changed_logits[:, :6], atol=1e-6)
  assert not np.allclose(logits[:, 6:], changed_logits[:, 6:], atol=1e-3)


def test_blocked_and_chunked_attention_match_plain_attention(monkeypatch):
  # 130 tokens: two causal query blocks (65 + 65); a budget of two sequences' scores runs the
  # batch of 3 through lax.map with a remainder chunk. Fresh jits: both are read when tracing.
  model, params = _init(TINY)
  tokens = jax.random.randint(jax.random.key(2), (3, 130), 0, TINY.vocab_size)
  positions = _arange_positions(3, 130)
  monkeypatch.setattr(transformer_lib, "_MAX_CAUSAL_QUERY_BLOCKS", 1)
  plain_logits, _ = jax.jit(model.module.apply)(params, tokens, positions)
  monkeypatch.undo()
  monkeypatch.setattr(transformer_lib, "_ATTENTION_CHUNK_BYTES", 2 * TINY.n_heads * 130 * 130 * 4)
  logits, _ = jax.jit(model.module.apply)(params, tokens, positions)
  np.testing.assert_allclose(logits, plain_logits, atol=1e-5)


def test_rope_rotates_pairs_by_position_times_frequency():
  # head_dim 4: pairs (x0, x2) and (x1, x3) rotate by p * theta**0 and p * theta**-0.5.
  x = jnp.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 1, 1, 4)
  theta, position = 100.0, 3
  out = transformer_lib._rope(x, jnp.full((1, 1), position), theta)[0, 0, 0]
  angle0, angle1 = position * 1.0, position / 10.0
  expected = [1 * math.cos(angle0) - 3 * math.sin(angle0),
              2 * math.cos(angle1) - 4 * math.sin(angle1),
              3 * math.cos(angle0) + 1 * math.sin(angle0),
              4 * math.cos(angle1) + 2 * math.sin(angle1)]
  np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_rope_scores_depend_on_relative_position_only():
  q = jax.random.normal(jax.random.key(0), (1, 1, 1, 8))
  k = jax.random.normal(jax.random.key(1), (1, 1, 1, 8))
  score = lambda p_q, p_k: jnp.sum(transformer_lib._rope(q, jnp.full((1, 1), p_q), 1e4)
                                   * transformer_lib._rope(k, jnp.full((1, 1), p_k), 1e4))
  np.testing.assert_allclose(score(7, 3), score(24, 20), rtol=1e-4)
  np.testing.assert_allclose(transformer_lib._rope(q, jnp.zeros((1, 1), jnp.int32), 1e4), q)


@pytest.mark.parametrize(
    "scaling", [None, transformer_lib.RopeScaling(factor=8.0, original_max_len=64)])
def test_rope_table_matches_computed_angles(scaling):
  x = jax.random.normal(jax.random.key(0), (2, 5, 3, 16))
  positions = jnp.array([[0, 1, 2, 3, 4], [90, 17, 250, 255, 33]])
  computed = transformer_lib._rope(x, positions, 1e4, scaling)
  from_table = transformer_lib._rope(x, positions, 1e4, scaling, table_len=256)
  np.testing.assert_allclose(from_table, computed, atol=2e-6)
  # Positions past the table read its last row.
  clipped = transformer_lib._rope(x, positions + 1000, 1e4, scaling, table_len=256)
  np.testing.assert_allclose(clipped, transformer_lib._rope(x, jnp.full_like(positions, 255), 1e4,
                                                            scaling), atol=2e-6)


def test_parameter_names_and_shapes():
  _, params = _init(dataclasses.replace(TINY, n_kv_heads=4, attention_bias=True))
  layer = params["params"]["layers_0"]
  assert layer["self_attn"]["q_proj"]["kernel"].shape == (32, 32)
  assert layer["self_attn"]["k_proj"]["kernel"].shape == (32, 32)
  assert "bias" in layer["self_attn"]["v_proj"]
  assert "bias" not in layer["self_attn"]["o_proj"]
  assert layer["mlp"]["gate_proj"]["kernel"].shape == (32, 64)
  assert "lm_head" not in params["params"]
  _, params = _init(dataclasses.replace(TINY, n_kv_heads=1, tie_embeddings=False))
  assert params["params"]["layers_1"]["self_attn"]["k_proj"]["kernel"].shape == (32, 8)
  assert params["params"]["lm_head"]["kernel"].shape == (32, 50)
  assert "bias" not in params["params"]["layers_1"]["self_attn"]["q_proj"]


def test_bfloat16_runs_and_stays_close_to_float32():
  config = dataclasses.replace(TINY, dtype="bfloat16", param_dtype="bfloat16")
  model = _Jitted(config)
  tokens = jax.random.randint(jax.random.key(2), (3, 12), 0, config.vocab_size)
  shapes = jax.eval_shape(model.module.init, jax.random.key(0), tokens, tokens)
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(shapes))
  # The float32 test weights rounded to bfloat16 (initialising afresh would cost a compile).
  float32_model, float32_params = _init(TINY)
  params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), float32_params)
  logits, cache = model.apply(params, tokens, _arange_positions(3, 12))
  assert logits.dtype == jnp.float32 and cache.k[0].dtype == jnp.bfloat16
  assert np.isfinite(logits).all()
  logits32, _ = float32_model.apply(float32_params, tokens, _arange_positions(3, 12))
  np.testing.assert_allclose(logits, logits32, atol=0.1)
  step_logits, _ = model.apply(params, tokens[:, 11:], jnp.full((3, 1), 11), cache)
  np.testing.assert_allclose(step_logits[:, 0], logits[:, 11], atol=0.05)


@pytest.mark.parametrize("overrides, field", [
    ({"d_model": 30}, "d_model"),
    ({"n_kv_heads": 3}, "n_kv_heads"),
    ({"n_layers": 0}, "n_layers"),
    ({"vocab_size": -1}, "vocab_size"),
    ({"d_ff": 1.5}, "d_ff"),
    ({"rope_theta": 0.0}, "rope_theta"),
    ({"dtype": "float64"}, "dtype"),
    ({"param_dtype": "int8"}, "param_dtype"),
    ({"d_model": 12, "n_heads": 4, "n_kv_heads": 4}, "d_model // n_heads"),  # odd head width
])
def test_config_validation_names_the_field(overrides, field):
  with pytest.raises(ValueError, match=field.replace("/", r"\/")):
    dataclasses.replace(TINY, **overrides)


def test_token_logprobs_hand_worked():
  # V = 4. Row 0: uniform logits, so every token has log(1/4). Row 1: logits (0, log 3, 0, 0)
  # at t=0 give token 1 probability 3/6; then uniform.
  logits = jnp.zeros((2, 3, 4)).at[1, 0, 1].set(math.log(3.0))
  tokens = jnp.array([[2, 0, 3], [0, 1, 2]])
  out = networks.token_logprobs(logits, tokens)
  expected = [[0.0, math.log(0.25), math.log(0.25)], [0.0, math.log(0.5), math.log(0.25)]]
  np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_token_logprobs_matches_model_log_softmax():
  model, params = _init(TINY)
  tokens = jax.random.randint(jax.random.key(2), (3, 12), 0, TINY.vocab_size)
  logits, _ = model.apply(params, tokens, _arange_positions(3, 12))
  out = jax.jit(networks.token_logprobs)(logits, tokens)
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  assert out.shape == (3, 12)
  for t in range(1, 12):
    np.testing.assert_allclose(out[:, t], log_probs[jnp.arange(3), t - 1, tokens[:, t]],
                               atol=1e-6)
