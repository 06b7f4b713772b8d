"""A Llama / Qwen2-style decoder-only transformer in Flax linen, with a KV cache.

Pre-norm blocks (RMSNorm), rotary position embeddings (RoPE, the rotate-half convention of the
Hugging Face Llama code), grouped-query attention, a SwiGLU MLP, a final RMSNorm and a tied or
untied LM head. Parameter names follow the Hugging Face module names (`q_proj`, `gate_proj`, ...) so
that checkpoint conversion is a rename and a transpose. Optionally a scalar value head on the final
hidden states, for PPO.

Shapes: `B` batch, `T` tokens in this call, `S` cache slots, `D` model width, `V` vocabulary,
`K` key/value heads, `H` query heads, `Dh` head width.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
_INIT_STDDEV = 0.02  # Llama's `initializer_range`.


@dataclasses.dataclass(frozen=True, kw_only=True)
class RopeScaling:
  """Llama 3 frequency-dependent RoPE scaling (`rope_type: 'llama3'` in Hugging Face configs).

  Frequencies whose wavelength is shorter than `original_max_len / high_freq_factor` are kept,
  those longer than `original_max_len / low_freq_factor` are divided by `factor`, and the ones in
  between are interpolated linearly in `original_max_len / wavelength`.

  Attributes:
    factor: how much the low frequencies are slowed down (> 0).
    low_freq_factor: bound of the slowed-down band, in units of `original_max_len` (> 0).
    high_freq_factor: bound of the kept band (> low_freq_factor).
    original_max_len: the context length the model was pretrained with
      (`original_max_position_embeddings`).
  """

  factor: float
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_len: int = 8192

  def __post_init__(self):
    for name in ("factor", "low_freq_factor", "original_max_len"):
      if not getattr(self, name) > 0:
        raise ValueError(f"RopeScaling.{name} must be positive, got {getattr(self, name)!r}.")
    if not self.high_freq_factor > self.low_freq_factor:
      raise ValueError(f"RopeScaling.high_freq_factor ({self.high_freq_factor}) must exceed "
                       f"low_freq_factor ({self.low_freq_factor}).")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig:
  """Architecture of a `Transformer`.

  Attributes:
    vocab_size: number of token ids; logits have this many entries.
    d_model: width of the residual stream.
    n_layers: number of decoder blocks.
    n_heads: query heads per attention layer; `d_model // n_heads` is the head width.
    n_kv_heads: key/value heads (grouped-query attention); each serves `n_heads // n_kv_heads`
      query heads. `n_kv_heads == n_heads` is ordinary multi-head attention.
    d_ff: hidden width of the SwiGLU MLP (`intermediate_size` in Hugging Face configs).
    max_len: the longest sequence (prompt plus generation) the model is used with; the default
      cache length of `init_cache` and a bound that the sampler checks. RoPE itself has no limit.
    rope_theta: base of the RoPE frequencies.
    rope_scaling: None for plain RoPE ('default' in Hugging Face configs), or the Llama 3
      frequency scaling.
    rms_norm_eps: epsilon added to the mean square in every RMSNorm.
    tie_embeddings: if True the LM head is the transposed token embedding, else its own matrix.
    attention_bias: if True the q, k and v projections have biases (Qwen2); o_proj never has one.
    dtype: activation and matmul dtype name, 'float32' or 'bfloat16' (or 'float16'). Norms,
      RoPE, attention softmax and logits are computed in float32 whatever this is.
    param_dtype: parameter storage dtype name, same choices as `dtype`.
    value_head: if True the model also has a scalar value head (`Transformer.values`), a
      `Dense(D -> 1)` on the final-norm hidden states, initialised to zero. It is not part of a
      causal-LM checkpoint: loading starts it at zero, export leaves it out.
  """

  vocab_size: int
  d_model: int = 128
  n_layers: int = 2
  n_heads: int = 4
  n_kv_heads: int = 2
  d_ff: int = 384
  max_len: int = 256
  rope_theta: float = 10000.0
  rope_scaling: RopeScaling | None = None
  rms_norm_eps: float = 1e-6
  tie_embeddings: bool = True
  attention_bias: bool = False
  dtype: str = "float32"
  param_dtype: str = "float32"
  value_head: bool = False

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_len"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"TransformerConfig.{name} must be a positive int, got {value!r}.")
    for name in ("rope_theta", "rms_norm_eps"):
      if not getattr(self, name) > 0:
        raise ValueError(f"TransformerConfig.{name} must be positive, got {getattr(self, name)!r}.")
    if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
      raise ValueError("TransformerConfig.rope_scaling must be None or a RopeScaling, got "
                       f"{self.rope_scaling!r}.")
    if self.d_model % self.n_heads:
      raise ValueError(f"TransformerConfig.d_model ({self.d_model}) must be divisible by "
                       f"n_heads ({self.n_heads}).")
    if self.n_heads % self.n_kv_heads:
      raise ValueError(f"TransformerConfig.n_heads ({self.n_heads}) must be divisible by "
                       f"n_kv_heads ({self.n_kv_heads}).")
    if (self.d_model // self.n_heads) % 2:
      raise ValueError(f"TransformerConfig.d_model // n_heads ({self.d_model // self.n_heads}) "
                       "must be even for RoPE.")
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in _DTYPES:
        raise ValueError(f"TransformerConfig.{name} must be one of {sorted(_DTYPES)}, "
                         f"got {getattr(self, name)!r}.")

  @property
  def head_dim(self) -> int:
    return self.d_model // self.n_heads

  @property
  def activation_dtype(self) -> jnp.dtype:
    return _DTYPES[self.dtype]

  @property
  def parameter_dtype(self) -> jnp.dtype:
    return _DTYPES[self.param_dtype]


@flax.struct.dataclass
class KVCache:
  """Keys and values of every layer, one slot per position.

  `k` is a tuple with one `[B, n_kv_heads, head_dim, S]` array per layer (keys transposed, slots
  last) and `v` one `[B, n_kv_heads, S, head_dim]` array per layer; `k[l][b, :, :, s]` and
  `v[l][b, :, s]` hold the key (after RoPE) and value of sequence `b`'s token at position `s`.

  Layout, measured on CPU: one array per layer rather than a stacked `[n_layers, ...]` array,
  because a layer then reads and updates its cache in place, where slicing a stacked array
  copied the layer's cache on every decode step (more time than the rest of the step); heads
  before slots and positions, because that is the layout the attention matmuls read, where
  `[B, S, heads, Dh]` was transposed (copied) on every step. Keys are stored `[Dh, S]` so that a
  query's scores are a plain product `q [.., Dh] x k [Dh, S]`: with keys `[S, Dh]` the score
  product of a decode step (batch 64, 4 key heads, 96 slots) took 1.5 ms per layer on 2 cores,
  against 0.1 ms from the transposed layout.

  `attended_slots` (static), when set to `n`, makes a call read only slots `[0, n)` for its
  attention (writes still go to any slot): the caller promises that no query of the call sits at
  a position `>= n`, so nothing it may see is left out. A decode step then reads the slots in use
  rather than the whole buffer.
  """

  k: tuple[jax.Array, ...]
  v: tuple[jax.Array, ...]
  attended_slots: int | None = flax.struct.field(pytree_node=False, default=None)


def init_cache(config: TransformerConfig, batch_size: int, cache_len: int | None = None,
               dtype: jnp.dtype | str | None = None) -> KVCache:
  """An all-zero cache for `batch_size` sequences of up to `cache_len` (default `max_len`) tokens.

  `dtype` defaults to the activation dtype of `config`.
  """
  cache_len = config.max_len if cache_len is None else cache_len
  dtype = config.activation_dtype if dtype is None else jnp.dtype(dtype)
  heads = (batch_size, config.n_kv_heads)
  keys = tuple(jnp.zeros(heads + (config.head_dim, cache_len), dtype)
               for _ in range(config.n_layers))
  values = tuple(jnp.zeros(heads + (cache_len, config.head_dim), dtype)
                 for _ in range(config.n_layers))
  return KVCache(k=keys, v=values)


def token_logprobs(logits: jax.Array, tokens: jax.Array) -> jax.Array:
  """Log-probability of each token given the tokens before it.

  Args:
    logits: `[B, T, V]` output of the model on `tokens` (`logits[:, t]` predicts token `t + 1`).
    tokens: `[B, T]` int token ids.

  Returns:
    `[B, T]` float32 `out` with `out[:, t] = log p(tokens[:, t] | tokens[:, :t])` for `t >= 1`
    and `out[:, 0] = 0` (the first token has no prediction). Aligned with `tokens`, so a
    `loss_mask` over tokens applies to it directly.
  """
  if logits.ndim != 3 or logits.shape[:2] != tokens.shape:
    raise ValueError(f"Expected logits [B, T, V] and tokens [B, T], got {logits.shape} and "
                     f"{tokens.shape}.")
  logits = logits[:, :-1].astype(jnp.float32)
  targets = tokens[:, 1:]
  target_logits = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  logprobs = target_logits - jax.nn.logsumexp(logits, axis=-1)
  return jnp.pad(logprobs, ((0, 0), (1, 0)))


def _dense_init():
  return nn.initializers.normal(_INIT_STDDEV)


class RMSNorm(nn.Module):
  """Root-mean-square norm with a learned scale, computed in float32 as in Hugging Face Llama."""

  eps: float
  dtype: jnp.dtype
  param_dtype: jnp.dtype

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
    x = x.astype(jnp.float32)
    x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.eps)
    return scale.astype(self.dtype) * x.astype(self.dtype)


def _rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None) -> np.ndarray:
  """The `[head_dim / 2]` float32 RoPE frequencies (radians per position), scaled if asked."""
  half = head_dim // 2
  inv_freq = 1.0 / theta ** (np.arange(half, dtype=np.float32) / half)
  if scaling is None:
    return inv_freq
  wavelength = 2 * math.pi / inv_freq
  slowed = inv_freq / scaling.factor
  # 0 at the slowed-down edge of the band, 1 at the kept edge.
  blend = ((scaling.original_max_len / wavelength - scaling.low_freq_factor)
           / (scaling.high_freq_factor - scaling.low_freq_factor))
  interpolated = (1 - blend) * slowed + blend * inv_freq
  kept = wavelength < scaling.original_max_len / scaling.high_freq_factor
  slow = wavelength > scaling.original_max_len / scaling.low_freq_factor
  return np.where(kept, inv_freq, np.where(slow, slowed, interpolated)).astype(np.float32)


@functools.lru_cache(maxsize=16)
def _rope_table(head_dim: int, theta: float, scaling: RopeScaling | None,
                length: int) -> tuple[np.ndarray, np.ndarray]:
  """`(cos, sin)` of the RoPE angles of positions `0 .. length - 1`, each `[length, head_dim / 2]`.

  The angle is the float32 product `position * inv_freq`, as computed on the fly.
  """
  angles = np.arange(length, dtype=np.float32)[:, None] * _rope_inv_freq(head_dim, theta, scaling)
  angles = angles.astype(np.float64)
  return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _rope(x: jax.Array, positions: jax.Array, theta: float,
          scaling: RopeScaling | None = None, table_len: int | None = None) -> jax.Array:
  """Rotates `x` `[B, T, heads, Dh]` by its `positions` `[B, T]` (rotate-half convention).

  With `table_len`, the cosines and sines are read from a table of positions
  `0 .. table_len - 1` (positions outside it are clipped to it) instead of being computed: in a
  decode step XLA evaluated `cos` and `sin` once per rotated element, and on 2 CPU cores the
  table took 5-6% off a generation of the benchmark's models (as much as leaving RoPE out).
  """
  if table_len is None:
    angles = positions.astype(jnp.float32)[..., None] * _rope_inv_freq(x.shape[-1], theta, scaling)
    cos, sin = jnp.cos(angles), jnp.sin(angles)  # [B, T, Dh/2]
  else:
    cos_table, sin_table = _rope_table(x.shape[-1], theta, scaling, table_len)
    cos = jnp.take(cos_table, positions, axis=0, mode="clip")
    sin = jnp.take(sin_table, positions, axis=0, mode="clip")
  cos, sin = cos[:, :, None, :], sin[:, :, None, :]
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return rotated.astype(x.dtype)


# Attention scores are kept below this many bytes per chunk of sequences (a `lax.map` over chunks
# beyond it): on CPU, arrays of tens of MB are slow to allocate and fill (measured on 2 cores: an
# elementwise op over 33 MB ran at 3 GB/s, over 16 MB at 17 GB/s), and one [128, 4, 128, 128]
# float32 score array (33 MB) made causal attention 2-4x slower than chunks of it.
_ATTENTION_CHUNK_BYTES = 16 * 2**20
# Causal attention without a cache splits long sequences into up to 4 query blocks of at least
# 64 queries, each attending only to the keys up to its end, which skips most of the masked upper
# triangle (3/8 of the scores with 4 blocks). Short sequences keep one block: less to compile.
_MAX_CAUSAL_QUERY_BLOCKS = 4
_MIN_CAUSAL_QUERY_BLOCK = 64
# Up to this many query rows per key head (group x tokens) the scores against a transposed key
# cache are an elementwise product and a sum instead of a matmul.
_ELEMENTWISE_SCORE_ROWS = 8


def _attend_one(q, k, v, q_positions, k_positions, *, keys_transposed=False):
  """Grouped-query attention of one sequence's `q` `[T, H, Dh]` over `k, v` `[K, S, Dh]`.

  With `keys_transposed`, `k` is `[K, Dh, S]` (the cache's layout). Query `t` sees key `s` iff
  `k_positions[s] <= q_positions[t]`. Returns `[T, H * Dh]`.
  """
  length, n_heads, head_dim = q.shape
  n_kv_heads = k.shape[0]
  n_keys = k.shape[2 if keys_transposed else 1]
  group = n_heads // n_kv_heads
  # Queries as [K, G * T, Dh], so that both matmuls are plain batched [M, K] x [K, N] products
  # (XLA on CPU ran a transposed form of the second one through a slow generic path).
  q = q.reshape(length, n_kv_heads, group, head_dim).transpose(1, 2, 0, 3)
  q = q.reshape(n_kv_heads, group * length, head_dim) * jnp.asarray(head_dim**-0.5, q.dtype)
  if not keys_transposed:
    scores = jnp.einsum("kqd,ksd->kqs", q, k, preferred_element_type=jnp.float32)
  elif group * length <= _ELEMENTWISE_SCORE_ROWS:
    # A few query rows (a decode step): a multiply and a sum over Dh beat a matmul this thin
    # (0.12 against 0.31 ms per layer at batch 64, 4 key heads, 96 slots, 2 CPU cores).
    scores = jnp.sum(q[:, :, :, None].astype(jnp.float32) * k[:, None].astype(jnp.float32),
                     axis=2)
  else:
    scores = jnp.einsum("kqd,kds->kqs", q, k, preferred_element_type=jnp.float32)
  visible = k_positions[None, :] <= q_positions[:, None]
  scores = jnp.where(visible, scores.reshape(n_kv_heads, group, length, n_keys),
                     jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  out = jnp.einsum("kqs,ksd->kqd", probs.reshape(n_kv_heads, group * length, n_keys), v)
  out = out.reshape(n_kv_heads, group, length, head_dim).transpose(2, 0, 1, 3)
  return out.reshape(length, n_heads * head_dim)


def _attend(q, k, v, q_positions, k_positions, *, causal_blocks=1, keys_transposed=False):
  """Batched `_attend_one`: `q` `[B, T, H, Dh]`, `k, v` `[B, K, S, Dh]`, positions `[B, T], [B, S]`.

  With `keys_transposed`, `k` is `[B, K, Dh, S]`. With `causal_blocks > 1` the caller promises
  that key `s` has position `s` and query `t` sees no key past index `t` (plain causal attention,
  `S == T`, keys not transposed): query block `i` then only reads keys up to the block's end.
  """
  batch, length, n_heads, _ = q.shape
  n_keys = v.shape[2]

  def one_sequence(args):
    q, k, v, q_positions, k_positions = args
    if causal_blocks == 1:
      return _attend_one(q, k, v, q_positions, k_positions, keys_transposed=keys_transposed)
    bounds = [length * i // causal_blocks for i in range(causal_blocks + 1)]
    return jnp.concatenate([
        _attend_one(q[start:end], k[:, :end], v[:, :end], q_positions[start:end],
                    k_positions[:end])
        for start, end in zip(bounds[:-1], bounds[1:]) if end > start
    ], axis=0)

  score_bytes = n_heads * length * n_keys * 4
  chunk = max(1, _ATTENTION_CHUNK_BYTES // score_bytes)
  args = (q, k, v, q_positions, k_positions)
  if chunk >= batch:
    return jax.vmap(one_sequence)(args)
  return jax.lax.map(one_sequence, args, batch_size=chunk)


def _replace_at(items: tuple, index: int, item) -> tuple:
  return items[:index] + (item,) + items[index + 1:]


class Attention(nn.Module):
  """Grouped-query self-attention with RoPE, reading and updating its layer's cache entry."""

  config: TransformerConfig
  layer_index: int

  @nn.compact
  def __call__(self, x, positions, cache):
    cfg = self.config
    batch, length, _ = x.shape
    dense = lambda features, use_bias, name: nn.Dense(
        features, use_bias=use_bias, kernel_init=_dense_init(), dtype=cfg.activation_dtype,
        param_dtype=cfg.parameter_dtype, name=name)
    q = dense(cfg.n_heads * cfg.head_dim, cfg.attention_bias, "q_proj")(x)
    k = dense(cfg.n_kv_heads * cfg.head_dim, cfg.attention_bias, "k_proj")(x)
    v = dense(cfg.n_kv_heads * cfg.head_dim, cfg.attention_bias, "v_proj")(x)
    # With a cache, a token at a position past its slots is not cached and cannot see itself, so
    # its output means nothing anyway: RoPE can read a table of the cache's length.
    table_len = None if cache is None else cache.v[self.layer_index].shape[2]
    rope = functools.partial(_rope, positions=positions, theta=cfg.rope_theta,
                             scaling=cfg.rope_scaling, table_len=table_len)
    q = rope(q.reshape(batch, length, cfg.n_heads, cfg.head_dim))
    k = rope(k.reshape(batch, length, cfg.n_kv_heads, cfg.head_dim))
    # Keys and values heads-first, the layout of the cache and of the attention matmuls.
    k = k.transpose(0, 2, 1, 3)
    v = v.reshape(batch, length, cfg.n_kv_heads, cfg.head_dim).transpose(0, 2, 1, 3)
    if cache is None:
      # Causal over the T tokens in order; the caller gathers (k, v) into a cache with slot i =
      # token i.
      order = jnp.broadcast_to(jnp.arange(length), (batch, length))
      blocks = min(_MAX_CAUSAL_QUERY_BLOCKS, max(1, length // _MIN_CAUSAL_QUERY_BLOCK))
      out = _attend(q, k, v, order, order, causal_blocks=blocks)
      return dense(cfg.d_model, False, "o_proj")(out), (k.swapaxes(2, 3), v)
    # Scatter each token's key/value into slot == its position (in place inside a loop);
    # positions past the end are dropped. Keys go to [b, head, :, slot] of the transposed cache.
    rows = jnp.arange(batch)[:, None, None]
    heads = jnp.arange(cfg.n_kv_heads)[None, :, None]
    slot_of = positions[:, None, :]
    layer = self.layer_index
    cache_k = cache.k[layer].at[rows, heads, :, slot_of].set(
        k.astype(cache.k[layer].dtype), mode="drop")
    cache_v = cache.v[layer].at[rows, heads, slot_of].set(
        v.astype(cache.v[layer].dtype), mode="drop")
    n_slots = cache.attended_slots or cache_v.shape[2]
    slots = jnp.broadcast_to(jnp.arange(n_slots), (batch, n_slots))
    out = _attend(q, cache_k[..., :n_slots].astype(q.dtype),
                  cache_v[:, :, :n_slots].astype(q.dtype), positions, slots, keys_transposed=True)
    cache = cache.replace(k=_replace_at(cache.k, layer, cache_k),
                          v=_replace_at(cache.v, layer, cache_v))
    return dense(cfg.d_model, False, "o_proj")(out), cache


class MLP(nn.Module):
  """SwiGLU: `down(silu(gate(x)) * up(x))`."""

  config: TransformerConfig

  @nn.compact
  def __call__(self, x):
    cfg = self.config
    dense = lambda features, name: nn.Dense(
        features, use_bias=False, kernel_init=_dense_init(), dtype=cfg.activation_dtype,
        param_dtype=cfg.parameter_dtype, name=name)
    hidden = nn.silu(dense(cfg.d_ff, "gate_proj")(x)) * dense(cfg.d_ff, "up_proj")(x)
    return dense(cfg.d_model, "down_proj")(hidden)


class DecoderLayer(nn.Module):
  """One pre-norm block: `x + attn(norm(x))`, then `x + mlp(norm(x))`."""

  config: TransformerConfig
  layer_index: int

  @nn.compact
  def __call__(self, x, positions, cache):
    """Returns `(x, cache)`; without a cache, `(x, (k, v))` of this layer's tokens."""
    cfg = self.config
    norm = lambda name: RMSNorm(cfg.rms_norm_eps, cfg.activation_dtype, cfg.parameter_dtype,
                                name=name)
    attn_out, cache = Attention(cfg, self.layer_index, name="self_attn")(
        norm("input_layernorm")(x), positions, cache)
    x = x + attn_out
    x = x + MLP(cfg, name="mlp")(norm("post_attention_layernorm")(x))
    return x, cache


class Transformer(nn.Module):
  """Decoder-only language model.

  `__call__(tokens, positions, cache=None) -> (logits, cache)`; `hidden_states` and `logits` split
  it so that a caller that needs only some positions' logits (the sampler) skips the LM head on
  the others. With `config.value_head`, `values(hidden)` gives PPO's state values, or
  `model.apply(params, tokens, positions, method=model.logits_and_values)` both at once.
  """

  config: TransformerConfig

  def setup(self):
    cfg = self.config
    self.embed_tokens = nn.Embed(
        cfg.vocab_size, cfg.d_model, embedding_init=_dense_init(), dtype=cfg.activation_dtype,
        param_dtype=cfg.parameter_dtype)
    self.layers = [DecoderLayer(cfg, i) for i in range(cfg.n_layers)]
    self.norm = RMSNorm(cfg.rms_norm_eps, cfg.activation_dtype, cfg.parameter_dtype)
    if not cfg.tie_embeddings:
      self.lm_head = nn.Dense(
          cfg.vocab_size, use_bias=False, kernel_init=_dense_init(), dtype=cfg.activation_dtype,
          param_dtype=cfg.parameter_dtype)
    if cfg.value_head:
      self.value_head = nn.Dense(
          1, kernel_init=nn.initializers.zeros_init(), dtype=cfg.activation_dtype,
          param_dtype=cfg.parameter_dtype)

  def __call__(self, tokens: jax.Array, positions: jax.Array,
               cache: KVCache | None = None) -> tuple[jax.Array, KVCache]:
    """Logits for every token.

    Args:
      tokens: `[B, T]` int32 token ids.
      positions: `[B, T]` int32 positions of those tokens (used by RoPE and, with a cache, as
        the slot each token is written to).
      cache: None for a plain causal pass where token `i` sees tokens `j <= i`. Otherwise a
        `KVCache` with `S` slots: each token's key/value is written into slot == its position
        (positions `>= S` are dropped, and such tokens' outputs are meaningless) and a query at
        position `p` attends to slots `s <= p`.

    Returns:
      `(logits [B, T, V] float32, cache)`. Without an input cache the returned cache holds the
      `T` tokens' keys/values with slot `i` = token `i` (slot == position when
      `positions == arange(T)`), which is how the sampler prefills.
    """
    hidden, cache = self.hidden_states(tokens, positions, cache)
    if self.config.value_head and self.is_initializing():
      self.values(hidden)  # so that `init` creates the value head's parameters too
    return self.logits(hidden), cache

  def logits_and_values(self, tokens: jax.Array,
                        positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Causal pass (no cache): `(logits [B, T, V], values [B, T])`, both float32."""
    hidden, _ = self.hidden_states(tokens, positions)
    return self.logits(hidden), self.values(hidden)

  def values(self, hidden: jax.Array) -> jax.Array:
    """Value head: `[..., D]` final hidden states to `[...]` float32 values."""
    if not self.config.value_head:
      raise ValueError("This model has no value head (TransformerConfig.value_head=False).")
    return self.value_head(hidden)[..., 0].astype(jnp.float32)

  def hidden_states(self, tokens: jax.Array, positions: jax.Array,
                    cache: KVCache | None = None) -> tuple[jax.Array, KVCache]:
    """Like `__call__`, but returns the final-norm hidden states `[B, T, D]` instead of logits."""
    if tokens.ndim != 2 or tokens.shape != positions.shape:
      raise ValueError(f"tokens and positions must both be [B, T], got {tokens.shape} and "
                       f"{positions.shape}.")
    x = self.embed_tokens(tokens)
    if cache is not None:
      for layer in self.layers:
        x, cache = layer(x, positions, cache)
      return self.norm(x), cache
    new_k, new_v = [], []
    for layer in self.layers:
      x, (k, v) = layer(x, positions, None)
      new_k.append(k)
      new_v.append(v)
    return self.norm(x), KVCache(k=tuple(new_k), v=tuple(new_v))

  def logits(self, hidden: jax.Array) -> jax.Array:
    """LM head: `[..., D]` final hidden states to `[..., V]` float32 logits."""
    if self.config.tie_embeddings:
      embedding = self.embed_tokens.embedding.astype(hidden.dtype)
      return jnp.einsum("...d,vd->...v", hidden, embedding, preferred_element_type=jnp.float32)
    return self.lm_head(hidden).astype(jnp.float32)
