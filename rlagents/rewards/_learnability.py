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
                        kind: str = "variance", peak: float = 0.5) -> jax.Array:
  """The proposer's reward for each proposal, from its solver group's success rate.

  With the default `peak` m = 0.5:

      variance:  4 p (1 - p)       (0 at p = 0 or 1, 1 at p = 0.5)
      absolute:  1 - |2 p - 1|     (the same ends and peak, linear in between)

  Another peak m in (0, 1) moves the maximum (still 1) to p = m and keeps the ends at 0:

      variance:  p^(2m) (1 - p)^(2(1-m)) / (m^(2m) (1 - m)^(2(1-m)))   (m = 0.5: 4 p (1 - p))
      absolute:  p / m for p <= m, (1 - p) / (1 - m) above             (m = 0.5: 1 - |2p - 1|)

  A peak below one half pays most for tasks the solver solves now and then, so the proposer
  leaves problems it already solves sooner.

  Either way a proposal the checker did not accept (invalid, unsolvable, a duplicate, or one
  that falls in an evaluation split) earns 0, whatever its `success_rate`.

  Args:
    success_rate: `[N]` the solver group's success rate p on each proposal, in [0, 1].
    accepted: `[N]` bool, whether the checker accepted the proposal.
    kind: 'variance' or 'absolute'.
    peak: the success rate that earns the most, in (0, 1); a Python float.

  Returns:
    `[N]` float32 rewards in [0, 1].
  """
  if kind not in LEARNABILITY_KINDS:
    raise ValueError(f"Unknown learnability kind {kind!r}; valid choices: "
                     f"{', '.join(LEARNABILITY_KINDS)}.")
  if not (isinstance(peak, (int, float)) and 0.0 < peak < 1.0):
    raise ValueError(f"learnability `peak` must be a number in (0, 1), got {peak!r}.")
  p = jnp.clip(jnp.asarray(success_rate, jnp.float32), 0.0, 1.0)
  accepted = jnp.asarray(accepted)
  if accepted.dtype != jnp.bool_:
    raise ValueError(f"`accepted` must be bool, got dtype {accepted.dtype}.")
  if p.shape != accepted.shape:
    raise ValueError(f"`accepted` must have shape {p.shape} (from `success_rate`), got "
                     f"{accepted.shape}.")
  m = float(peak)
  if m == 0.5:   # the same values in a form with fewer roundings
    value = 4.0 * p * (1.0 - p) if kind == "variance" else 1.0 - jnp.abs(2.0 * p - 1.0)
  elif kind == "variance":
    a, b = 2.0 * m, 2.0 * (1.0 - m)
    value = p**a * (1.0 - p)**b / (m**a * (1.0 - m)**b)
  else:
    value = jnp.where(p <= m, p / m, (1.0 - p) / (1.0 - m))
  return jnp.where(accepted, value, 0.0)
