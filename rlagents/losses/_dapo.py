"""DAPO's parts that sit next to the loss: dynamic sampling and overlong reward shaping.

Reference: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
https://arxiv.org/abs/2503.14476. Clip-higher and token-level aggregation live in
`policy_gradient_loss` (clip_high, aggregation='token_mean').
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from rlagents.losses import _advantages
from rlagents.losses import _validation


def dynamic_sampling_mask(rewards: ArrayLike, *, group_size: int) -> jax.Array:
  """Which groups carry a learning signal: True where a group's rewards are not all equal.

  Reference: DAPO, Yu et al. 2025, https://arxiv.org/abs/2503.14476 (section 3.2, dynamic
  sampling): groups whose completions are all right (or all wrong) have zero group-relative
  advantage and only dilute the batch.

      keep_g = max_{i in g} r_i != min_{i in g} r_i

  Jittable. To use it without changing shapes, weight the loss mask by
  `jnp.repeat(keep, group_size)`; to drop and refill groups on the host, see
  `select_informative_groups`.

  Args:
    rewards: `[N]` rewards (floating, integer or bool), N = num_groups * group_size, group-major.
    group_size: completions per prompt, >= 2 (static).

  Returns:
    `[num_groups]` bool.
  """
  grouped = _advantages.grouped_rewards(rewards, group_size)
  return grouped.max(axis=1) != grouped.min(axis=1)


def select_informative_groups(rewards: ArrayLike, *, group_size: int,
                              num_groups: int) -> np.ndarray:
  """Host-side, not jittable: sample indices of the first `num_groups` groups worth training on.

  Reference: DAPO dynamic sampling, https://arxiv.org/abs/2503.14476 (Algorithm 1, lines 6-8):
  over-sample, drop groups whose rewards are all equal, and keep sampling until the batch is full.

  `rewards` holds every group generated so far (the batch plus any extra groups), group-major.
  The result lists, in order, the sample indices of the first `num_groups` groups whose rewards
  vary; it is shorter than `num_groups * group_size` when too few such groups exist, which is the
  caller's cue to generate more and call again:

      pool = generate(prompts.next(num_groups))
      while (keep := select_informative_groups(pool.rewards, group_size=K,
                                               num_groups=num_groups)).size < num_groups * K:
        pool = concatenate(pool, generate(prompts.next(extra_groups)))
      batch = jax.tree.map(lambda x: x[keep], pool)   # a full batch of a fixed shape

  Args:
    rewards: `[M * group_size]` rewards of M candidate groups, group-major.
    group_size: completions per prompt, >= 2.
    num_groups: groups wanted in the batch, >= 1.

  Returns:
    int64 numpy array of at most `num_groups * group_size` sample indices into `rewards`.
  """
  if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) or (
      num_groups < 1):
    raise ValueError(f"`num_groups` must be a positive int, got {num_groups!r}.")
  keep = np.asarray(dynamic_sampling_mask(np.asarray(rewards), group_size=group_size))
  groups = np.flatnonzero(keep)[:num_groups]
  return (groups[:, None] * group_size + np.arange(group_size)).reshape(-1).astype(np.int64)


def overlong_penalty(lengths: ArrayLike, *, max_len: int, buffer_len: int,
                     penalty: float = 1.0) -> jax.Array:
  """DAPO's soft overlong punishment: a reward term that grows as a response nears the budget.

  Reference: DAPO, Yu et al. 2025, https://arxiv.org/abs/2503.14476 (eq. 13).

  With L = max_len, C = buffer_len (L_cache in the paper) and |y| the response length in tokens:

      R(y) = 0                          if |y| <= L - C
             penalty * (L - C - |y|) / C  if L - C < |y| <= L
             -penalty                    if |y| > L

  Add it to the task reward. It is linear and continuous from 0 at L - C to -penalty at L.

  Args:
    lengths: `[B]` response lengths in tokens (int or float).
    max_len: L, the length from which the full penalty applies (the generation budget).
    buffer_len: C, the width of the soft zone, 0 < C <= L.
    penalty: magnitude of the full penalty, >= 0.

  Returns:
    `[B]` float32 rewards, each in [-penalty, 0].
  """
  lengths = jnp.asarray(lengths)
  if lengths.dtype == jnp.bool_ or not jnp.issubdtype(lengths.dtype, jnp.number):
    raise ValueError(f"`lengths` must be an int or float array, got dtype {lengths.dtype}.")
  _validation.check_rank(lengths, 1, "lengths")
  _validation.check_number(max_len, "max_len", low=0, low_inclusive=False)
  _validation.check_number(buffer_len, "buffer_len", low=0, low_inclusive=False, high=max_len)
  _validation.check_number(penalty, "penalty", low=0)
  lengths = lengths.astype(jnp.promote_types(lengths.dtype, jnp.float32))
  soft_start = max_len - buffer_len
  ramp = (soft_start - lengths) / buffer_len
  return penalty * jnp.clip(ramp, -1.0, 0.0)
