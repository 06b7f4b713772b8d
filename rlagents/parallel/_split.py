"""An update step in two parts, gradients and optimizer, so fsdp need gather only parameters."""

import dataclasses
import operator
from collections.abc import Callable

import jax
import jax.numpy as jnp


def reduce_across(tree, weight: jax.Array, axis_name) -> object:
  """Combines per-device means into the mean over all devices' data (identity when `axis_name` is None).

  Each device's `tree` (gradients or metrics) is a mean over its own shard, whose denominator is
  `weight` (its token count, say). The whole batch's mean is the weight-averaged per-device mean,
  `psum(weight * tree) / psum(weight)`; with equal weights this is `lax.pmean`. So a data-parallel
  update equals the single-device update on the concatenated batch.

  Args:
    tree: a pytree of per-device means.
    weight: scalar, this device's share of the mean's denominator.
    axis_name: the mapped axis name (or tuple of names) to reduce over, or None.
  """
  if axis_name is None:
    return tree
  total = jax.lax.psum(weight, axis_name)
  share = weight / jnp.maximum(total, 1e-9)
  return jax.tree.map(lambda x: jax.lax.psum(x * share, axis_name), tree)


@dataclasses.dataclass(frozen=True)
class SplitUpdate:
  """An inner update given as its gradient part and its optimizer part.

  Called like a plain inner update, `split(*state_args, batch, axis_name=None) -> (state,
  metrics)`, it computes `grads`, reduces the gradients across `axis_name` weighted by each
  shard's `weight` (`reduce_across`) and runs `apply`. Given to `shard_map_update` or
  `make_update_step` on an fsdp mesh, the parts let the wrapper gather only the parameters for
  the forward and backward pass, reduce-scatter the gradients so each device gets the slice of
  the parameters it stores, and apply the optimizer to the stored slices: the optimizer state is
  never gathered, and `apply` sees the whole (sharded) arrays, so a global-norm clip stays exact.

  Attributes:
    grads: `grads(state, params, *rest, batch, *, axis_name) -> (grads, weight, metrics)`:
      `params` are the first state argument's parameters, whole; `rest` the other state arguments
      (e.g. the KL reference), whole; `state` the first state argument, passed for its static
      fields (`apply_fn`): under fsdp its arrays are this device's slices, so the parameters must
      be read from `params`. `grads` is the mean gradient over this device's `batch` (not yet
      reduced), `weight` this shard's part of the loss's denominator (a scalar), `metrics` already
      reduced across `axis_name` (the function does its own, e.g. with `reduce_across`).
    apply: `apply(state, grads, metrics) -> (state, metrics)`: the optimizer step on the whole
      gradients (e.g. `state.apply_gradients(grads=grads)`), adding metrics such as the gradient
      norm. Under fsdp it runs on the global (sharded) arrays, so it must not use `axis_name`.
    params: the parameters of a first state argument (default `state.params`); applied to a tree
      of `PartitionSpec`s shaped like the state too.
  """
  grads: Callable
  apply: Callable
  params: Callable = operator.attrgetter("params")

  def __call__(self, *args, axis_name=None):
    state, rest, batch = args[0], args[1:-1], args[-1]
    grads, weight, metrics = self.grads(state, self.params(state), *rest, batch,
                                        axis_name=axis_name)
    return self.apply(state, reduce_across(grads, weight, axis_name), metrics)
