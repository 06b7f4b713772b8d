"""The self-play proposer's reward: how learnable its task is for the solver.

Pure and jittable. A task the solver always or never solves teaches it nothing; one it solves
about half the time teaches it most (Absolute Zero, https://arxiv.org/abs/2505.03335; the
variance of a Bernoulli outcome is what a group-relative gradient can use).
"""

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

LEARNABILITY_KINDS = ("variance", "absolute")


def learnability_reward(success_rate: ArrayLike, accepted: ArrayLike, *,
                        kind: str = "variance") -> jax.Array:
  """The proposer's reward for each proposal, from its solver group's success rate.

      variance:  4 p (1 - p)       (0 at p = 0 or 1, 1 at p = 0.5)
      absolute:  1 - |2 p - 1|     (the same ends and peak, linear in between)

  and 0 for a proposal the checker did not accept (invalid, unsolvable, a duplicate, or one
  that falls in an evaluation split), whatever its `success_rate`.

  Args:
    success_rate: `[N]` the solver group's success rate p on each proposal, in [0, 1].
    accepted: `[N]` bool, whether the checker accepted the proposal.
    kind: 'variance' or 'absolute'.

  Returns:
    `[N]` float32 rewards in [0, 1].
  """
  if kind not in LEARNABILITY_KINDS:
    raise ValueError(f"Unknown learnability kind {kind!r}; valid choices: "
                     f"{', '.join(LEARNABILITY_KINDS)}.")
  p = jnp.clip(jnp.asarray(success_rate, jnp.float32), 0.0, 1.0)
  accepted = jnp.asarray(accepted)
  if accepted.dtype != jnp.bool_:
    raise ValueError(f"`accepted` must be bool, got dtype {accepted.dtype}.")
  if p.shape != accepted.shape:
    raise ValueError(f"`accepted` must have shape {p.shape} (from `success_rate`), got "
                     f"{accepted.shape}.")
  value = 4.0 * p * (1.0 - p) if kind == "variance" else 1.0 - jnp.abs(2.0 * p - 1.0)
  return jnp.where(accepted, value, 0.0)
