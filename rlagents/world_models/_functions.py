"""The numerical parts of DreamerV3, pure and unbatched where they can be.

Hafner et al. 2023, "Mastering Diverse Domains through World Models",
https://arxiv.org/abs/2301.04104:

- `symlog(x) = sign(x) log(1 + |x|)` squashes targets of any scale; `symexp` inverts it.
- Two-hot: a scalar `y` is encoded on fixed bins `b` (spaced evenly in symlog space) as weight on
  the two neighbouring bins that interpolates it linearly; a head trained with cross-entropy to
  these targets predicts `symexp(sum softmax(logits) * b)`, robust to the scale of rewards and
  returns.
- Categorical latents are mixed with 1% uniform (`unimix`) so no class has probability 0 and the
  KL terms stay finite; samples pass gradients straight through.
- KL balancing with free bits: the dynamics loss `max(free, KL(sg(post) || prior))` trains the
  prior towards the posterior, the representation loss `max(free, KL(post || sg(prior)))` keeps the
  posterior predictable; below `free` nats neither gives a gradient.
- Lambda-returns over an imagined trajectory, and the percentile return scale
  `S = EMA(P95(R) - P5(R))` that divides advantages by `max(1, S)`.
"""

import flax.struct
import jax
import jax.numpy as jnp
from jax import lax


def symlog(x: jax.Array) -> jax.Array:
  """`sign(x) * log(1 + |x|)`, elementwise.

  Args:
    x: any array.
  """
  return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x: jax.Array) -> jax.Array:
  """`sign(x) * (exp(|x|) - 1)`, the inverse of `symlog`, elementwise.

  Args:
    x: any array.
  """
  return jnp.sign(x) * jnp.expm1(jnp.abs(x))


def symlog_bins(num_bins: int = 255, limit: float = 20.0) -> jax.Array:
  """`[num_bins]` bin centres spaced evenly over `[-limit, limit]` in symlog space.

  Args:
    num_bins: >= 2; odd, so that 0 is a bin and a zero target is one-hot.
    limit: the largest symlog value represented (20 covers |y| up to ~5e8).
  """
  if num_bins < 2:
    raise ValueError(f"symlog_bins needs num_bins >= 2, got {num_bins}")
  return jnp.linspace(-limit, limit, num_bins, dtype=jnp.float32)


def twohot(x: jax.Array, bins: jax.Array) -> jax.Array:
  """Two-hot encoding of `x [...]` on `bins [K]` (ascending): `[..., K]`, rows summing to 1.

  The weight goes to the two bins around `x`, in proportion to closeness, so
  `sum(twohot(x) * bins) == x` for `bins[0] <= x <= bins[-1]`; values outside are clipped to
  the end bins. `x` is in the bins' space (symlog it first for `symlog_bins`).

  Args:
    x: values, any shape.
    bins: `[K]` ascending bin centres.
  """
  x = jnp.clip(x, bins[0], bins[-1])
  # Index of the bin at or below x, kept inside [0, K - 2] so that above is a valid bin.
  below = jnp.clip(jnp.searchsorted(bins, x, side="right") - 1, 0, bins.shape[0] - 2)
  above = below + 1
  low, high = bins[below], bins[above]
  weight_above = jnp.clip((x - low) / (high - low), 0.0, 1.0)
  return (jax.nn.one_hot(below, bins.shape[0]) * (1.0 - weight_above)[..., None]
          + jax.nn.one_hot(above, bins.shape[0]) * weight_above[..., None])


def twohot_mean(logits: jax.Array, bins: jax.Array) -> jax.Array:
  """`symexp(sum(softmax(logits) * bins))`: a two-hot head's prediction in the target's scale.

  Args:
    logits: `[..., K]`.
    bins: `[K]`, in symlog space (`symlog_bins`).
  """
  return symexp(jnp.sum(jax.nn.softmax(logits, axis=-1) * bins, axis=-1))


def twohot_loss(logits: jax.Array, target: jax.Array, bins: jax.Array) -> jax.Array:
  """Cross-entropy of `logits [..., K]` against `twohot(symlog(target))`: `[...]`.

  Args:
    logits: the head's output.
    target: the target in its natural scale (a reward, a return); not differentiated.
    bins: `[K]` in symlog space.
  """
  labels = lax.stop_gradient(twohot(symlog(target), bins))
  return -jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def unimix_logits(logits: jax.Array, unimix: float) -> jax.Array:
  """Log-probabilities of `(1 - unimix) * softmax(logits) + unimix / K` over the last axis.

  Args:
    logits: `[..., K]`.
    unimix: the uniform share, in [0, 1).
  """
  if unimix == 0:
    return jax.nn.log_softmax(logits, axis=-1)
  probs = jax.nn.softmax(logits, axis=-1)
  probs = (1.0 - unimix) * probs + unimix / logits.shape[-1]
  return jnp.log(probs)


def sample_onehot(key: jax.Array, logits: jax.Array) -> jax.Array:
  """A one-hot sample of each categorical in `logits [..., K]`, gradients straight through.

  The forward value is the one-hot sample; the gradient is that of the probabilities
  (Bengio et al. 2013, https://arxiv.org/abs/1308.3432).

  Args:
    key: a PRNG key.
    logits: `[..., K]`.
  """
  probs = jax.nn.softmax(logits, axis=-1)
  index = jax.random.categorical(key, logits, axis=-1)
  sample = jax.nn.one_hot(index, logits.shape[-1], dtype=probs.dtype)
  return sample + probs - lax.stop_gradient(probs)


def categorical_kl(logits_p: jax.Array, logits_q: jax.Array) -> jax.Array:
  """`KL(p || q)` summed over the classes and the latents: `[..., S, K] -> [...]`.

  Args:
    logits_p: log-probabilities (or logits) of p, `[..., S, K]` (S categorical latents).
    logits_q: likewise of q.
  """
  log_p = jax.nn.log_softmax(logits_p, axis=-1)
  log_q = jax.nn.log_softmax(logits_q, axis=-1)
  return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=(-2, -1))


def kl_balance_losses(post_logits: jax.Array, prior_logits: jax.Array, *,
                      free_nats: float = 1.0) -> tuple[jax.Array, jax.Array, jax.Array]:
  """DreamerV3's dynamics and representation losses with free bits: `[..., S, K] -> [...]` each.

    dyn = max(free_nats, KL(sg(post) || prior))    trains the prior
    rep = max(free_nats, KL(post || sg(prior)))    trains the posterior (the encoder)

  Both have the same value, the clipped KL; only their gradients differ. The caller weighs
  them (DreamerV3: 0.5 dyn + 0.1 rep).

  Args:
    post_logits: the posterior's log-probabilities, `[..., S, K]`.
    prior_logits: the prior's, likewise.
    free_nats: below this KL (summed over the latents) neither loss has a gradient.

  Returns:
    `(dyn, rep, kl)`: the two losses and the unclipped KL, each `[...]`.
  """
  sg = lax.stop_gradient
  dyn_kl = categorical_kl(sg(post_logits), prior_logits)
  rep_kl = categorical_kl(post_logits, sg(prior_logits))
  return jnp.maximum(dyn_kl, free_nats), jnp.maximum(rep_kl, free_nats), sg(dyn_kl)


def lambda_returns(reward: jax.Array, value: jax.Array, discount: jax.Array, *,
                   lambda_: float) -> jax.Array:
  """TD(lambda) returns of an imagined trajectory, time-major.

    R_H = v_H;   R_t = r_{t+1} + d_{t+1} ((1 - lambda) v_{t+1} + lambda R_{t+1})

  Args:
    reward: `[H, ...]`, `reward[t]` the reward on the way from step t to t + 1.
    value: `[H + 1, ...]`, the critic's values at steps 0..H.
    discount: `[H, ...]`, `discount[t]` = gamma * continue-probability at step t + 1.
    lambda_: the mix between one-step and longer returns.

  Returns:
    `[H, ...]`, the returns of steps 0..H-1.
  """
  shape = reward.shape
  if value.shape != (shape[0] + 1, *shape[1:]) or discount.shape != shape:
    raise ValueError(f"lambda_returns: reward {reward.shape}, discount {discount.shape} and "
                     f"value {value.shape} must be [H, ...], [H, ...] and [H + 1, ...].")

  def backward(next_return, inputs):
    r, d, v_next = inputs
    ret = r + d * ((1.0 - lambda_) * v_next + lambda_ * next_return)
    return ret, ret

  _, returns = lax.scan(backward, value[-1], (reward, discount, value[1:]), reverse=True)
  return returns


@flax.struct.dataclass
class ReturnScale:
  """Running 5th and 95th percentiles of the lambda-returns (EMAs), for advantage scaling.

  Attributes:
    low: float32 scalar, EMA of the 5th percentile.
    high: float32 scalar, EMA of the 95th percentile.
  """
  low: jax.Array
  high: jax.Array

  @classmethod
  def create(cls) -> "ReturnScale":
    return cls(low=jnp.float32(0.0), high=jnp.float32(0.0))

  @property
  def scale(self) -> jax.Array:
    """`max(1, high - low)`: the divisor of the advantages."""
    return jnp.maximum(1.0, self.high - self.low)


def update_return_scale(scale: ReturnScale, returns: jax.Array, *, decay: float = 0.99,
                        axis_name=None) -> ReturnScale:
  """Folds the 5th/95th percentiles of `returns` (all elements) into the EMAs.

  Under a device map the returns of every device are gathered first, so the percentiles are
  those of the whole batch.

  Args:
    scale: the running percentiles.
    returns: lambda-returns of any shape.
    decay: the EMA's decay.
    axis_name: the mapped device axis, or None.
  """
  returns = lax.stop_gradient(returns).reshape(-1)
  if axis_name is not None:
    returns = lax.all_gather(returns, axis_name, tiled=True)
  low, high = jnp.percentile(returns, jnp.array([5.0, 95.0]))
  return ReturnScale(low=decay * scale.low + (1 - decay) * low,
                     high=decay * scale.high + (1 - decay) * high)
