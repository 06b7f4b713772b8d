"""Low-rank adapters (LoRA, https://arxiv.org/abs/2106.09685) on chosen projections of the decoder.

The adapters are a pytree of their own, beside the frozen base parameters: for each targeted
`Dense` kernel `W` `[in, out]` they hold `lora_a` `[in, r]` and `lora_b` `[r, out]`, and the
model runs with `W + (alpha / r) * lora_a @ lora_b`. `merge_lora` computes those kernels, so

    loss_fn = lambda adapters: loss(merge_lora(base, adapters, config=cfg), batch)

differentiates with respect to the adapters only: only they reach the optimiser and the
checkpoint, and the same `merge_lora` gives the parameters to export. Merging costs
`in * r * out` multiply-adds per target, far below a forward pass over a batch of tokens.
`lora_b` starts at zero, so the adapted model starts equal to the base model.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraConfig:
  """Which projections get adapters, and their size.

  Attributes:
    rank: `r`, the inner width of each adapter.
    alpha: the update is scaled by `alpha / rank`.
    targets: projection names (of `PROJECTIONS`) that get adapters, in every layer.
  """

  rank: int = 8
  alpha: float = 16.0
  targets: tuple[str, ...] = ("q_proj", "v_proj")

  def __post_init__(self):
    if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank <= 0:
      raise ValueError(f"LoraConfig.rank must be a positive int, got {self.rank!r}.")
    if not self.alpha > 0:
      raise ValueError(f"LoraConfig.alpha must be positive, got {self.alpha!r}.")
    if not isinstance(self.targets, tuple) or not self.targets:
      raise ValueError(f"LoraConfig.targets must be a non-empty tuple, got {self.targets!r}.")
    unknown = sorted(set(self.targets) - set(PROJECTIONS))
    if unknown:
      raise ValueError(f"LoraConfig.targets has unknown projections {unknown}; choose from "
                       f"{PROJECTIONS}.")

  @property
  def scale(self) -> float:
    return self.alpha / self.rank


def _targeted_kernels(params: dict, config: LoraConfig) -> dict[tuple[str, ...], jax.Array]:
  """Path of each targeted module (ending in its projection name) -> its kernel."""
  kernels = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    keys = tuple(k.key for k in path)
    if keys[-1] == "kernel" and len(keys) >= 2 and keys[-2] in config.targets:
      kernels[keys[:-1]] = leaf
  if not kernels:
    raise ValueError(f"No kernel of {config.targets} in the parameters.")
  return kernels


def _set(tree: dict, path: tuple[str, ...], value) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def init_lora(key: jax.Array, params: dict, *, config: LoraConfig) -> dict:
  """Adapters for `params` (the model variables, `{'params': ...}`).

  `lora_a` is drawn with standard deviation `1 / sqrt(in)`, `lora_b` is zero, both float32.

  Returns:
    `{'params': {...: {'q_proj': {'lora_a': [in, r], 'lora_b': [r, out]}}}}`, mirroring the
    paths of the targeted kernels.
  """
  adapters = {}
  for index, (path, kernel) in enumerate(sorted(_targeted_kernels(params, config).items())):
    fan_in, fan_out = kernel.shape
    lora_a = jax.random.normal(jax.random.fold_in(key, index), (fan_in, config.rank),
                               jnp.float32) / jnp.sqrt(fan_in)
    _set(adapters, path, {"lora_a": lora_a,
                          "lora_b": jnp.zeros((config.rank, fan_out), jnp.float32)})
  return adapters


def merge_lora(params: dict, adapters: dict, *, config: LoraConfig) -> dict:
  """`params` with every adapted kernel replaced by `W + scale * lora_a @ lora_b` (jittable).

  The merged kernels keep `W`'s dtype; the update is computed in float32. The result is what
  the model runs with, and what `rlagents.hf.export_pretrained` writes.

  Raises:
    ValueError: if an adapter has no kernel in `params` or a kernel of `config.targets` has no
      adapter.
  """
  kernels = _targeted_kernels(params, config)
  found = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(adapters):
    keys = tuple(k.key for k in path)
    found.setdefault(keys[:-1], {})[keys[-1]] = leaf
  if set(found) != set(kernels):
    raise ValueError(f"Adapters {sorted(set(found) ^ set(kernels))[:3]} do not match the targeted "
                     "kernels of the parameters.")

  def merged(path, leaf):
    keys = tuple(k.key for k in path)
    if keys[-1] != "kernel" or keys[:-1] not in found:
      return leaf
    adapter = found[keys[:-1]]
    update = adapter["lora_a"].astype(jnp.float32) @ adapter["lora_b"].astype(jnp.float32)
    return (leaf.astype(jnp.float32) + config.scale * update).astype(leaf.dtype)

  return jax.tree_util.tree_map_with_path(merged, params)
