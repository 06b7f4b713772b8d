r"""Memory per device of a model config on a mesh, from shapes only (nothing is allocated).

    python -m experiments.plan --config=experiments/configs/models.py:qwen2.5-7b

For each mesh (one 141 GB GPU, eight 141 GB GPUs, a TPU v5e-8 with 16 GB per chip), with the
parameters replicated (data parallel) and split over 'fsdp' (`rlagents.parallel.array_spec`,
the job's rule), full fine-tuning and LoRA, it prints the bytes one device holds:

  params       every parameter (`jax.eval_shape` of the model's init), in `param_dtype`;
               with LoRA the frozen base plus the adapters.
  optimizer    the job's optimizer state for the trained parameters (`jax.eval_shape` of
               `learners.make_optimizer(...).init`: AdamW's two moments, counters).
  gradients    one gradient per trained parameter, in `param_dtype`.
  activations  an estimate of what one update keeps for the backward pass, without
               rematerialisation: per token and layer `6 d + 2 kv_heads head_dim + 3 d_ff`
               values plus the attention weights (`heads x sequence_length`), in `dtype`, and
               the float32 logits (`vocab` per token); for `sequences_per_device` sequences.
  kv_cache     the sampler's cache for those sequences: `2 x layers x kv_heads x head_dim`
               values per token, in `dtype`.

An array is split over 'fsdp' when the job's rule splits it (large enough, a dimension divisible
by the axis size); otherwise every device holds all of it.
"""

import dataclasses

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
from ml_collections import config_flags

from rlagents import learners
from rlagents import networks
from rlagents import parallel

_CONFIG = config_flags.DEFINE_config_file(
    "config", "experiments/configs/models.py", "model shape and batch (experiments/configs/"
    "models.py)")

GB = 1e9
# name: (devices, bytes per device)
MESHES = {"1x GPU 141 GB": (1, 141 * GB), "8x GPU 141 GB": (8, 141 * GB),
          "TPU v5e-8 (16 GB)": (8, 16 * GB)}
FIELDS = ("params", "optimizer", "gradients", "activations", "kv_cache")


def _bytes(tree, fsdp: int) -> int:
  """Bytes one device holds of `tree` (shape structs) when split by the job's fsdp rule."""
  total = 0
  for leaf in jax.tree.leaves(tree):
    size = int(np.prod(leaf.shape)) * jnp.dtype(leaf.dtype).itemsize
    spec = parallel.array_spec(leaf.shape, fsdp)
    total += size // fsdp if any(axis is not None for axis in spec) else size
  return total


def model_config(config) -> networks.TransformerConfig:
  return networks.TransformerConfig(**config.model)


def memory(config, *, fsdp: int = 1, lora: bool = False) -> dict[str, int]:
  """Bytes per device (`FIELDS`) of `config` with parameters split over `fsdp` devices."""
  model_cfg = model_config(config)
  tokens = jnp.zeros((1, 1), jnp.int32)
  params = jax.eval_shape(networks.Transformer(model_cfg).init, jax.random.key(0), tokens,
                          tokens)
  trained = params
  held = _bytes(params, fsdp)
  if lora:
    lora_cfg = networks.LoraConfig(rank=config.lora_rank or 16,
                                   targets=tuple(config.lora_targets.split(",")))
    trained = jax.eval_shape(lambda p: networks.init_lora(jax.random.key(0), p,
                                                          config=lora_cfg), params)
    held += _bytes(trained, fsdp)
  optimizer = jax.eval_shape(learners.make_optimizer(learners.OptimizerConfig()).init, trained)
  d, layers = model_cfg.d_model, model_cfg.n_layers
  head_dim, kv = model_cfg.head_dim, model_cfg.n_kv_heads
  tokens_per_device = config.sequences_per_device * config.sequence_length
  act_size = jnp.dtype(model_cfg.dtype).itemsize
  per_token_layer = (6 * d + 2 * kv * head_dim + 3 * model_cfg.d_ff
                     + model_cfg.n_heads * config.sequence_length)
  return {
      "params": held,
      "optimizer": _bytes(optimizer, fsdp),
      "gradients": _bytes(trained, fsdp),
      "activations": (tokens_per_device * layers * per_token_layer * act_size
                      + tokens_per_device * model_cfg.vocab_size * 4),
      "kv_cache": tokens_per_device * 2 * layers * kv * head_dim * act_size,
  }


def parameter_count(config) -> int:
  tokens = jnp.zeros((1, 1), jnp.int32)
  shapes = jax.eval_shape(networks.Transformer(model_config(config)).init, jax.random.key(0),
                          tokens, tokens)
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))


def plan_rows(config) -> list[dict]:
  """One row per mesh, sharding and training mode, with the bytes per device and whether they
  fit the device's memory."""
  rows = []
  for mesh, (devices, capacity) in MESHES.items():
    for fsdp in sorted({1, devices}):
      for lora in (False, True):
        usage = memory(config, fsdp=fsdp, lora=lora)
        total = sum(usage.values())
        rows.append({"mesh": mesh, "fsdp": fsdp, "training": "lora" if lora else "full",
                     **usage, "total": total, "fits": total <= capacity})
  return rows


def main(argv):
  del argv
  config = _CONFIG.value
  cfg = model_config(config)
  print(f"{config.name}: {parameter_count(config) / 1e9:.3f}B parameters "
        f"({cfg.param_dtype}), {config.sequences_per_device} x {config.sequence_length} tokens "
        f"per device, LoRA rank {config.lora_rank or 16}")
  header = ["mesh", "fsdp", "training", *FIELDS, "total", "fits"]
  print(" | ".join(header))
  for row in plan_rows(config):
    cells = [row["mesh"], str(row["fsdp"]), row["training"]]
    cells += [f"{row[f] / GB:.2f} GB" for f in (*FIELDS, "total")]
    cells.append("yes" if row["fits"] else "no")
    print(" | ".join(cells))


if __name__ == "__main__":
  app.run(main)
