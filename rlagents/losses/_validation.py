"""Argument checks shared by the losses.

They run while tracing (shapes, dtypes and Python hyper-parameters are static), so a bad call fails
before anything is compiled, with a ValueError that names the offending argument.
"""

import numbers
import operator
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike


def as_float(x: ArrayLike, name: str, *, allow_integers: bool = False) -> jax.Array:
  """Returns `x` as a floating array of at least float32 precision.

  Other dtypes are an error, except integers (and bools) where `allow_integers` is set: rewards
  from a verifier are often 0/1 integers, whereas an integer log-prob is a bug.
  """
  x = jnp.asarray(x)
  if allow_integers and (x.dtype == jnp.bool_ or jnp.issubdtype(x.dtype, jnp.integer)):
    return x.astype(jnp.float32)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise ValueError(f"`{name}` must be a floating-point array, got dtype {x.dtype}.")
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def mask_weights(mask: ArrayLike, name: str) -> jax.Array:
  """Returns a bool or floating mask as float32 weights; integer masks are an error."""
  mask = jnp.asarray(mask)
  if mask.dtype != jnp.bool_ and not jnp.issubdtype(mask.dtype, jnp.floating):
    raise ValueError(
        f"`{name}` must be bool or floating (1 on tokens the policy generated, 0 on prompt, "
        f"padding and tool-output tokens), got dtype {mask.dtype}; cast it with `.astype(bool)`.")
  return mask.astype(jnp.float32)


def check_rank(x: jax.Array, ranks: int | Sequence[int], name: str) -> None:
  ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
  if x.ndim not in ranks:
    expected = " or ".join(str(r) for r in ranks)
    raise ValueError(f"`{name}` must have rank {expected}, got shape {x.shape}.")


def check_shape(x: jax.Array, shape: tuple[int, ...], name: str, reference: str) -> None:
  if x.shape != tuple(shape):
    raise ValueError(
        f"`{name}` must have shape {tuple(shape)} (from `{reference}`), got shape {x.shape}.")


def check_choice(value: str, choices: Sequence[str], name: str) -> None:
  if value not in choices:
    valid = ", ".join(repr(c) for c in choices)
    raise ValueError(f"Unknown {name} {value!r}; valid choices: {valid}.")


def check_group_size(group_size: int, minimum: int = 1) -> int:
  """Returns `group_size` as a Python int; it is static (it sets a reshape)."""
  try:
    group_size = operator.index(group_size)
  except TypeError:
    raise ValueError(
        f"`group_size` must be a Python int (static under jit: bind it with functools.partial), "
        f"got {group_size!r}.") from None
  if group_size < minimum:
    raise ValueError(f"`group_size` must be >= {minimum}, got {group_size}.")
  return group_size


def check_number(value, name: str, *, low=None, high=None, low_inclusive=True,
                 high_inclusive=True) -> None:
  """Checks a concrete hyper-parameter lies in a range; traced values pass unchecked."""
  if not all(isinstance(x, numbers.Real) for x in (value, 0 if low is None else low,
                                                    0 if high is None else high)):
    return
  too_low = low is not None and (value < low if low_inclusive else value <= low)
  too_high = high is not None and (value > high if high_inclusive else value >= high)
  if too_low or too_high:
    left = "[" if low_inclusive else "("
    right = "]" if high_inclusive else ")"
    interval = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
    raise ValueError(f"`{name}` must lie in {interval}, got {value}.")


def where_masked(x: jax.Array, weights: jax.Array) -> jax.Array:
  """Zeroes `x` where the mask is 0, so masked entries (even inf/nan) get exactly zero gradient."""
  return jnp.where(weights != 0, x, jnp.zeros_like(x))


def safe_denominator(x: jax.Array) -> jax.Array:
  """Replaces a zero count by 1, so an empty mask gives 0 instead of nan."""
  return jnp.where(x == 0, jnp.ones_like(x), x)
