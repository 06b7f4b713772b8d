"""Tests of `generate_segment` against a naive full-recompute decoder, and of its filtering."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import networks
from rlagents import sampling
from rlagents.sampling import _generate

TINY = networks.TransformerConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                  d_ff=64, max_len=32)
BUFFER_LEN = 16
MAX_NEW = 6
TRACES = []


class CountingTransformer(networks.Transformer):
  """Records every trace of the model, to check that the sampler compiles once per shape."""

  def hidden_states(self, *args, **kwargs):
    TRACES.append(1)
    return super().hidden_states(*args, **kwargs)


@functools.cache
def _setup():
  model = CountingTransformer(TINY)
  tokens = jnp.zeros((1, 4), jnp.int32)
  params = model.init(jax.random.key(0), tokens, tokens)
  params = jax.tree.map(lambda x: 3 * x, params)  # sharper distributions than the 0.02 init
  full_forward = jax.jit(lambda params, tokens: model.apply(
      params, tokens, jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape))[0])
  return model, params, full_forward


def _batch(seed):
  """Rows: regular; stops at the buffer end; inactive; already full; a single token."""
  lengths = np.array([3, BUFFER_LEN - 2, 5, BUFFER_LEN, 1], np.int32)
  active = np.array([True, True, False, True, True])
  tokens = np.asarray(jax.random.randint(jax.random.key(seed), (5, BUFFER_LEN), 1, 50))
  tokens = np.where(np.arange(BUFFER_LEN) < lengths[:, None], tokens, 0).astype(np.int32)
  return tokens, lengths, active


def _naive_greedy(params, full_forward, tokens, lengths, active, stop_tokens):
  """The specification: recompute the whole forward pass for every new token, take argmax."""
  tokens, lengths = tokens.copy(), lengths.copy()
  logprobs = np.zeros(tokens.shape, np.float32)
  mask = np.zeros(tokens.shape, bool)
  stop = np.full(len(lengths), -1)
  running = active & (lengths < BUFFER_LEN)
  for _ in range(MAX_NEW):
    log_probs = np.asarray(jax.nn.log_softmax(full_forward(params, tokens), axis=-1))
    for b in np.flatnonzero(running):
      position = lengths[b]
      token = int(np.argmax(log_probs[b, position - 1]))
      tokens[b, position], logprobs[b, position], mask[b, position] = (
          token, log_probs[b, position - 1, token], True)
      lengths[b] += 1
      if token in stop_tokens:
        stop[b], running[b] = token, False
      elif lengths[b] == BUFFER_LEN:
        running[b] = False
  return tokens, lengths, logprobs, mask, stop


def _greedy_case():
  model, params, full_forward = _setup()
  tokens, lengths, active = _batch(seed=3)  # a seed whose row 0 varies its greedy tokens
  # Stop on a token that row 0 would generate after its first one, and row 1 not before the
  # buffer ends: row 0 stops early, row 1 fills the buffer.
  unstopped = _naive_greedy(params, full_forward, tokens, lengths, active, stop_tokens=())
  row0 = unstopped[0][0, lengths[0]:lengths[0] + MAX_NEW]
  row1 = unstopped[0][1, lengths[1]:]
  stop_tokens = (int(next(t for t in row0[1:] if t not in row1 and t != row0[0])), 49)
  expected = _naive_greedy(params, full_forward, tokens, lengths, active, stop_tokens)
  generate = functools.partial(
      sampling.generate_segment, model=model, max_new_tokens=MAX_NEW, stop_tokens=stop_tokens,
      temperature=0.0)
  return params, generate, (tokens, lengths, active), stop_tokens, expected


def test_greedy_matches_naive_full_recompute():
  params, generate, (tokens, lengths, active), stop_tokens, expected = _greedy_case()
  out = generate(params, tokens, lengths, active, jax.random.key(0))
  want_tokens, want_lengths, want_logprobs, want_mask, want_stop = expected
  np.testing.assert_array_equal(out.tokens, want_tokens)
  np.testing.assert_array_equal(out.lengths, want_lengths)
  np.testing.assert_array_equal(out.generated_mask, want_mask)
  np.testing.assert_array_equal(out.stop_token, want_stop)
  np.testing.assert_allclose(out.logprobs, want_logprobs, atol=1e-5)
  # The case covers what it claims: row 0 stopped early on a stop token; row 1 filled the
  # buffer; rows 2 (inactive) and 3 (full) are untouched.
  assert out.stop_token[0] in stop_tokens and 2 <= out.lengths[0] - lengths[0] < MAX_NEW
  assert out.lengths[1] == BUFFER_LEN
  np.testing.assert_array_equal(out.lengths[2:4], lengths[2:4])
  np.testing.assert_array_equal(out.tokens[2:4], tokens[2:4])
  assert not out.generated_mask[2:4].any() and not out.logprobs[2:4].any()


def test_compiles_once_per_shape():
  params, generate, (tokens, lengths, active), _, _ = _greedy_case()
  generate(params, tokens, lengths, active, jax.random.key(0))
  traces = len(TRACES)
  other_tokens, _, _ = _batch(seed=7)
  out = generate(params, other_tokens, np.array([2, 9, 4, 1, 12], np.int32), ~active,
                 jax.random.key(3))
  jax.block_until_ready(out)
  assert traces > 0 and len(TRACES) == traces


def test_sampled_logprobs_are_untempered_model_logprobs():
  model, params, full_forward = _setup()
  tokens, lengths, active = _batch(seed=2)
  out = sampling.generate_segment(
      params, tokens, lengths, active, jax.random.key(5), model=model, max_new_tokens=MAX_NEW,
      stop_tokens=(), temperature=1.5, top_k=5, top_p=0.9)
  log_probs = np.asarray(jax.nn.log_softmax(full_forward(params, out.tokens), axis=-1))
  expected_lengths = np.where(active, np.minimum(lengths + MAX_NEW, BUFFER_LEN), lengths)
  np.testing.assert_array_equal(out.lengths, expected_lengths)
  generated = np.arange(BUFFER_LEN) >= lengths[:, None]
  generated &= np.arange(BUFFER_LEN) < expected_lengths[:, None]
  np.testing.assert_array_equal(out.generated_mask, generated)
  np.testing.assert_array_equal(np.where(generated, 0, out.tokens), np.where(generated, 0, tokens))
  for b, position in zip(*np.nonzero(generated)):
    token = out.tokens[b, position]
    np.testing.assert_allclose(out.logprobs[b, position], log_probs[b, position - 1, token],
                               atol=1e-5)
    # top_k=5: the sampled token is among the model's five most likely.
    assert (log_probs[b, position - 1] > log_probs[b, position - 1, token]).sum() < 5
  assert not np.asarray(out.logprobs)[~generated].any()
  np.testing.assert_array_equal(out.stop_token, -1)


def _sample_many(logits, n, **kwargs):
  keys = jax.random.split(jax.random.key(0), n)
  sample = jax.jit(jax.vmap(lambda key: _generate._filter_and_sample(key, logits, **kwargs)))
  return np.asarray(sample(keys))[:, 0]


def test_filtering_keeps_the_right_tokens():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
  n = 4000
  # top_p=0.7: tokens 0 and 1 reach 0.8 >= 0.7; renormalised to 0.625 / 0.375.
  counts = np.bincount(_sample_many(logits, n, temperature=1.0, top_k=0, top_p=0.7), minlength=4)
  np.testing.assert_allclose(counts / n, [0.625, 0.375, 0, 0], atol=0.03)
  # top_k=3, temperature 2: probabilities ∝ sqrt(p) over the top 3, i.e. 0.707 / 0.548 / 0.387
  # over 1.642 = 0.431 / 0.334 / 0.236.
  counts = np.bincount(_sample_many(logits, n, temperature=2.0, top_k=3, top_p=1.0), minlength=4)
  np.testing.assert_allclose(counts / n, [0.431, 0.334, 0.236, 0], atol=0.03)
  # top_k and top_p together: top 3 at temperature 1 is 0.526 / 0.316 / 0.158; top_p=0.6 keeps
  # the first two.
  samples = _sample_many(logits, n, temperature=1.0, top_k=3, top_p=0.6)
  assert set(np.unique(samples)) == {0, 1}
  for kwargs in (dict(temperature=0.0, top_k=0, top_p=1.0),
                 dict(temperature=1.0, top_k=1, top_p=1.0),
                 dict(temperature=1.0, top_k=0, top_p=0.1)):
    np.testing.assert_array_equal(_sample_many(logits, 50, **kwargs), 0)


def test_plain_sampling_follows_the_softmax():
  """No filtering: one uniform number per row picks by the cumulative distribution."""
  logits = jnp.log(jnp.array([[0.1, 0.0, 0.6, 0.3]]))  # token 1 has probability 0
  n = 8000
  counts = np.bincount(_sample_many(logits, n, temperature=1.0, top_k=0, top_p=1.0),
                       minlength=4)
  assert counts[1] == 0
  np.testing.assert_allclose(counts / n, [0.1, 0.0, 0.6, 0.3], atol=0.02)
  # A wide row where all the mass sits on the last entry: never past the end, never another.
  wide = jnp.full((1, 4096), -jnp.inf).at[0, -1].set(0.0)
  np.testing.assert_array_equal(
      _sample_many(wide, 200, temperature=1.0, top_k=0, top_p=1.0), 4095)


def test_wide_rows_sample_in_two_levels_and_follow_the_softmax():
  width = 8192
  assert width >= _generate._TWO_LEVEL_SAMPLE_WIDTH
  # Mass in three blocks of 64 (entries 3, 70, 71 and 8191); zero everywhere else, including the
  # entries around them in their blocks.
  probs = np.zeros(width)
  probs[[3, 70, 71, 8191]] = [0.2, 0.1, 0.3, 0.4]
  logits = jnp.log(jnp.asarray(probs, jnp.float32))[None]
  n = 8000
  counts = np.bincount(_sample_many(logits, n, temperature=1.0, top_k=0, top_p=1.0),
                       minlength=width)
  assert counts.sum() == counts[[3, 70, 71, 8191]].sum() == n
  np.testing.assert_allclose(counts[[3, 70, 71, 8191]] / n, [0.2, 0.1, 0.3, 0.4], atol=0.02)


def test_inverse_cdf_edges_never_pick_a_zero_weight_entry():
  weights = jnp.array([[0.0, 0.0, 2.0, 0.0, 1.0, 0.0]])
  pick = lambda u: int(_generate._first_exceeding(weights, jnp.full((1, 1), u))[0])
  assert pick(0.0) == 2  # u = 0: the first positive entry, not entry 0
  assert pick(0.5) == 2 and pick(0.7) == 4
  assert pick(1.0) == 4  # u * total rounded up to the total: the last positive entry


@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(max_new_tokens=0), "max_new_tokens"),
])
def test_invalid_settings_raise(kwargs, match):
  model, params, _ = _setup()
  tokens, lengths, active = _batch(seed=1)
  settings = dict(model=model, max_new_tokens=2, stop_tokens=(1,)) | kwargs
  with pytest.raises(ValueError, match=match):
    sampling.generate_segment(params, tokens, lengths, active, jax.random.key(0), **settings)


def test_prefill_blocks_stop_after_the_longest_prefix(monkeypatch):
  model, params, _ = _setup()
  # 3 rows x 8 positions per block; a 13-slot buffer is 2 blocks, the second padded.
  monkeypatch.setattr(_generate, "_PREFILL_BLOCK_TOKENS", 24)
  tokens = np.asarray(jax.random.randint(jax.random.key(4), (3, 13), 1, 50), np.int32)
  prefill = jax.jit(functools.partial(_generate._prefill, model=model))
  positions = np.broadcast_to(np.arange(13), (3, 13))
  hidden, full_cache = jax.jit(functools.partial(model.apply, method=model.hidden_states))(
      params, tokens, positions)

  lengths = np.array([5, 11, 0], np.int32)  # row 2 is not needed
  last_hidden, cache = prefill(params, tokens, lengths)
  np.testing.assert_allclose(last_hidden[:2], hidden[[0, 1], lengths[:2] - 1], atol=1e-5)
  for got, want in zip(cache.k, full_cache.k):  # keys [B, K, Dh, S]: slots last
    np.testing.assert_allclose(got[0, ..., :5], want[0, ..., :5], atol=1e-5)
    np.testing.assert_allclose(got[1, ..., :11], want[1, ..., :11], atol=1e-5)
  for got, want in zip(cache.v, full_cache.v):  # values [B, K, S, Dh]
    np.testing.assert_allclose(got[0, :, :5], want[0, :, :5], atol=1e-5)
    np.testing.assert_allclose(got[1, :, :11], want[1, :, :11], atol=1e-5)

  # Prefixes within the first block: the second block is never run, its slots stay zero.
  last_hidden, cache = prefill(params, tokens, np.array([3, 8, 0], np.int32))
  np.testing.assert_allclose(last_hidden[1], hidden[1, 7], atol=1e-5)
  assert not cache.k[0][..., 8:].any() and cache.k[0][..., :8].all()
  assert not cache.v[0][:, :, 8:].any() and cache.v[0][:, :, :8].all()


def test_prefill_finishes_with_shorter_blocks(monkeypatch):
  model, params, _ = _setup()
  # 16-position blocks while they fit in the longest prefix (23), then 4-position ones.
  monkeypatch.setattr(_generate, "_TAIL_PREFILL_BLOCK", 4)
  assert _generate._prefill_block_lens(2, 30) == (16, 4)
  tokens = np.asarray(jax.random.randint(jax.random.key(5), (2, 30), 1, 50), np.int32)
  positions = np.broadcast_to(np.arange(30), (2, 30))
  hidden, full_cache = jax.jit(functools.partial(model.apply, method=model.hidden_states))(
      params, tokens, positions)
  lengths = np.array([23, 9], np.int32)
  last_hidden, cache = jax.jit(functools.partial(_generate._prefill, model=model))(
      params, tokens, lengths)
  np.testing.assert_allclose(last_hidden, hidden[[0, 1], lengths - 1], atol=1e-5)
  for got, want in zip(cache.v, full_cache.v):
    np.testing.assert_allclose(got[0, :, :23], want[0, :, :23], atol=1e-5)
    np.testing.assert_allclose(got[1, :, :9], want[1, :, :9], atol=1e-5)
  # Blocks [0, 16), [16, 20), [20, 24) ran; nothing past slot 24 was written.
  assert cache.v[0][:, :, :24].all() and not cache.v[0][:, :, 24:].any()


def test_attention_windows_give_the_whole_buffer_results(monkeypatch):
  model, params, _ = _setup()
  # 8 positions per block over 4 rows, then 3-position tail blocks; windows of 2, 4 and 8 slots
  # in a 32-slot buffer.
  monkeypatch.setattr(_generate, "_PREFILL_BLOCK_TOKENS", 32)
  monkeypatch.setattr(_generate, "_TAIL_PREFILL_BLOCK", 3)

  def generate(lengths, min_window):  # sampled, so that logits far from the top matter too
    monkeypatch.setattr(_generate, "_MIN_WINDOW", min_window)
    tokens = np.asarray(jax.random.randint(jax.random.key(6), (4, 32), 1, 50), np.int32)
    tokens = np.where(np.arange(32) < lengths[:, None], tokens, 0).astype(np.int32)
    run = jax.jit(functools.partial(
        sampling.generate_segment.__wrapped__, model=model, max_new_tokens=12, stop_tokens=(),
        temperature=1.0))
    return run(params, tokens, lengths, np.ones(4, bool), jax.random.key(1))

  monkeypatch.setattr(_generate, "_MIN_WINDOW", 2)
  assert _generate._attention_windows(32) == (2, 4, 8, 32)
  assert _generate._prefill_block_lens(4, 32) == (8, 3)
  # Prompts of up to 2 tokens: decode steps in windows 2, 4, 8 and the whole buffer. Up to 7:
  # tail blocks [0, 3) in window 4 (not 2, where its last query would miss its own slot), [3, 6)
  # in 8, [6, 9) in the whole buffer. Up to 13: the 8-slot block in window 8, tail blocks in the
  # whole buffer.
  for lengths in ([1, 2, 1, 2], [3, 7, 5, 6], [3, 11, 6, 13]):
    lengths = np.array(lengths, np.int32)
    whole = generate(lengths, 1000)
    windowed = generate(lengths, 2)
    np.testing.assert_array_equal(windowed.tokens, whole.tokens)
    np.testing.assert_array_equal(windowed.lengths, np.minimum(lengths + 12, 32))
    np.testing.assert_allclose(windowed.logprobs, whole.logprobs, atol=1e-6)


def test_attended_slots_limit_what_attention_reads():
  model, params, _ = _setup()
  tokens = np.asarray(jax.random.randint(jax.random.key(8), (2, 6), 1, 50), np.int32)
  positions = np.broadcast_to(np.arange(6), (2, 6))
  cache = networks.init_cache(TINY, 2, 16)
  # NaN in slots 8 and up, which no query below position 8 sees, but which a read of them shows:
  # a value times its zero probability is still NaN.
  cache = cache.replace(k=tuple(k.at[..., 8:].set(np.nan) for k in cache.k),
                        v=tuple(v.at[:, :, 8:].set(np.nan) for v in cache.v))
  apply = jax.jit(functools.partial(model.apply, method=model.hidden_states))
  clean, _ = apply(params, tokens, positions, networks.init_cache(TINY, 2, 16))
  windowed, windowed_cache = apply(params, tokens, positions, cache.replace(attended_slots=8))
  whole, _ = apply(params, tokens, positions, cache)
  np.testing.assert_allclose(windowed, clean, atol=1e-6)
  assert np.isnan(whole).all()  # without the window the NaN slots are read
  # Writes are not limited: the window only bounds the reads.
  assert np.isnan(windowed_cache.v[0][:, :, 8:]).all()
  assert windowed_cache.v[0][:, :, :6].all()
