"""A reward model: the decoder trunk with a scalar head read at the last token of a sequence.

The model is a `Transformer` whose config has `value_head=True`; its per-token scalar output at
the last non-padding token is the sequence's score. Reusing the decoder (rather than a separate
class) means a reward model starts from a policy's weights (`reward_model_params`) and shares
its tokenizer. Padding is token id 0 and only ever trails the sequence.
"""

import dataclasses

import jax
import jax.numpy as jnp

from rlagents.networks import transformer


def reward_model_config(config: transformer.TransformerConfig) -> transformer.TransformerConfig:
  """`config` with the scalar head switched on."""
  return dataclasses.replace(config, value_head=True)


def _token_values(module: transformer.Transformer, tokens: jax.Array,
                  positions: jax.Array) -> jax.Array:
  hidden, _ = module.hidden_states(tokens, positions)
  return module.values(hidden)


def token_values(apply_fn, params, tokens: jax.Array) -> jax.Array:
  """`[B, T]` scalar head output after each token (no LM head is computed).

  Args:
    apply_fn: `model.apply` of a `Transformer` with `value_head=True`.
    params: its parameters.
    tokens: `[B, T]` int32, padding (id 0) at the end.
  """
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
  return apply_fn(params, tokens, positions, method=_token_values)


def sequence_scores(apply_fn, params, tokens: jax.Array) -> jax.Array:
  """`[B]` float32 scores: the scalar head at each row's last non-padding token.

  Args:
    apply_fn: `model.apply` of a `Transformer` with `value_head=True`.
    params: its parameters.
    tokens: `[B, T]` int32, each row a whole sequence followed by padding (id 0).
  """
  values = token_values(apply_fn, params, tokens)
  # The last nonzero position, not the count of nonzero ones: id 0 may be a real token.
  used = tokens != 0
  last = jnp.where(used.any(axis=1), tokens.shape[1] - 1 - jnp.argmax(used[:, ::-1], axis=1), 0)
  return jnp.take_along_axis(values, last[:, None], axis=1)[:, 0]


def reward_model_params(policy_params, config: transformer.TransformerConfig):
  """A reward model's parameters from a policy's: the same trunk and a zero scalar head.

  Args:
    policy_params: `{'params': ...}` of a `Transformer` built from `config` (with or without a
      value head).
    config: the policy's architecture.
  """
  inner = dict(policy_params["params"])
  dtype = config.parameter_dtype
  inner["value_head"] = {"kernel": jnp.zeros((config.d_model, 1), dtype),
                         "bias": jnp.zeros((1,), dtype)}
  return {"params": jax.tree.map(jnp.copy, inner)}
