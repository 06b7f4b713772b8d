"""Role-conditioned advantages: one policy trained in several roles (self-play's proposer and
solver), each role's advantages normalised over that role's own episodes.

Pure and jittable: `num_groups` and `num_roles` are static (bind them with functools.partial).
"""

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from rlagents.losses import _validation


def role_conditioned_advantages(rewards: ArrayLike, group_ids: ArrayLike, roles: ArrayLike,
                                *, num_groups: int, num_roles: int = 2,
                                epsilon: float = 1e-6) -> jax.Array:
  """Advantages of episodes played in several roles by one policy.

  Each episode's baseline is the mean reward of its group (the episodes of one prompt, which
  all share a role); the centred rewards are then scaled by their standard deviation over
  every episode of the same role. A role whose rewards live on another scale (the proposer's
  learnability in [0, 1] against the solver's shaped reward) thus gets advantages of the same
  size as the other role's, and neither role's spread sets the other's step size (SPIRAL,
  https://arxiv.org/abs/2506.24119, role-conditioned advantage estimation; Absolute Zero,
  https://arxiv.org/abs/2505.03335, per-role normalisation).

      c_i = r_i - mean_{j in group(i)} r_j
      A_i = c_i / (sqrt(mean_{j in role(i)} c_j^2) + epsilon)

  A group whose rewards are all equal gets exactly 0, as does every episode of a role whose
  centred rewards are all 0.

  Args:
    rewards: `[N]` rewards (floating, or integers / bools that are converted).
    group_ids: `[N]` int, the group of each episode in `[0, num_groups)`; a group holds
      episodes of one role only (the caller's contract; not checked inside jit).
    roles: `[N]` int, the role of each episode in `[0, num_roles)`.
    num_groups: how many groups there are (static).
    num_roles: how many roles there are (static).
    epsilon: added to each role's standard deviation.

  Returns:
    `[N]` advantages, float32 (or the rewards' wider float dtype).
  """
  rewards = _validation.as_float(rewards, "rewards", allow_integers=True)
  _validation.check_rank(rewards, 1, "rewards")
  group_ids, roles = jnp.asarray(group_ids), jnp.asarray(roles)
  for name, ids in (("group_ids", group_ids), ("roles", roles)):
    if not jnp.issubdtype(ids.dtype, jnp.integer):
      raise ValueError(f"`{name}` must be an integer array, got dtype {ids.dtype}.")
    _validation.check_shape(ids, rewards.shape, name, "rewards")
  ones = jnp.ones_like(rewards)
  group_count = jax.ops.segment_sum(ones, group_ids, num_segments=num_groups)
  group_sum = jax.ops.segment_sum(rewards, group_ids, num_segments=num_groups)
  group_mean = group_sum / jnp.maximum(group_count, 1.0)
  centred = rewards - group_mean[group_ids]
  group_max = jax.ops.segment_max(rewards, group_ids, num_segments=num_groups)
  group_min = jax.ops.segment_min(rewards, group_ids, num_segments=num_groups)
  # Exactly zero for an all-equal group: float rounding of its mean must not leave noise.
  centred = jnp.where(group_max[group_ids] == group_min[group_ids], 0.0, centred)
  role_count = jax.ops.segment_sum(ones, roles, num_segments=num_roles)
  role_square = jax.ops.segment_sum(centred**2, roles, num_segments=num_roles)
  role_std = jnp.sqrt(role_square / jnp.maximum(role_count, 1.0))
  return centred / (role_std[roles] + epsilon)
