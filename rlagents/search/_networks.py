"""Policy-value networks for board games and the MuZero model (representation, dynamics,
prediction), in Flax linen.

Shapes: `...` any batch shape, `O` the observation's shape (e.g. `(6, 7, 2)`), `A` actions,
`L` the latent width of the learned model.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

TORSOS = ("mlp", "conv")


class _Torso(nn.Module):
  """Features of an observation: an MLP on the flattened board (with a residual connection
  between equal widths and layer norm), or 3x3 convolutions then that MLP."""
  hidden_sizes: Sequence[int]
  torso: str = "mlp"
  channels: int = 32
  num_conv_layers: int = 2

  @nn.compact
  def __call__(self, obs: jax.Array, obs_ndim: int) -> jax.Array:
    batch_shape = obs.shape[:obs.ndim - obs_ndim]
    x = obs.astype(jnp.float32)
    if self.torso == "conv":
      if obs_ndim != 3:
        raise ValueError(f"the conv torso needs [H, W, C] observations, got {obs_ndim} dims")
      x = x.reshape((-1, *obs.shape[-3:]))
      for _ in range(self.num_conv_layers):
        x = jax.nn.relu(nn.Conv(self.channels, (3, 3))(x))
    x = x.reshape((*batch_shape, -1))
    for width in self.hidden_sizes:
      y = nn.LayerNorm()(jax.nn.relu(nn.Dense(width)(x)))
      x = x + y if x.shape[-1] == width else y
    return x


class PolicyValueNet(nn.Module):
  """`obs [..., *O] -> (logits [..., A], value [...])`, the value in [-1, 1] (tanh), from the
  side of the player to move.

  Attributes:
    num_actions: A.
    obs_ndim: dimensions of one observation (3 for a `[6, 7, 2]` board).
    hidden_sizes: widths of the dense layers of the shared torso.
    torso: 'mlp' (the flattened board) or 'conv' (3x3 convolutions first).
    channels: convolution channels (conv torso).
  """
  num_actions: int
  obs_ndim: int
  hidden_sizes: Sequence[int] = (128, 128)
  torso: str = "mlp"
  channels: int = 32

  @nn.compact
  def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    if self.torso not in TORSOS:
      raise ValueError(f"Unknown torso {self.torso!r}; valid choices: {TORSOS}.")
    x = _Torso(self.hidden_sizes, self.torso, self.channels)(obs, self.obs_ndim)
    logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.zeros)(x)
    value = jnp.tanh(nn.Dense(1)(x)[..., 0])
    return logits, value


def _normalise(latent: jax.Array) -> jax.Array:
  """Min-max scales each latent to [0, 1], as MuZero does for its hidden states."""
  low = latent.min(-1, keepdims=True)
  high = latent.max(-1, keepdims=True)
  return (latent - low) / (high - low + 1e-6)


class MuZeroNet(nn.Module):
  """MuZero's three functions (Schrittwieser et al. 2020, https://arxiv.org/abs/1911.08265).

  `represent(obs [..., *O]) -> latent [..., L]`; `dynamics(latent, action [...]) -> (latent,
  reward [...])`, the reward that of the player who moved, the new latent from the side of the
  player to move next; `predict(latent) -> (logits [..., A], value [...])`. Latents are scaled
  to [0, 1]. Rewards and values are tanh-squashed to [-1, 1]. `__call__` runs all three once (for
  `init`).

  Attributes:
    num_actions: A.
    obs_ndim: dimensions of one observation.
    latent_size: L.
    hidden_sizes: widths of each function's dense layers.
    torso: the representation's torso, 'mlp' or 'conv'.
    channels: its convolution channels.
  """
  num_actions: int
  obs_ndim: int
  latent_size: int = 128
  hidden_sizes: Sequence[int] = (128, 128)
  torso: str = "mlp"
  channels: int = 32

  def setup(self):
    if self.torso not in TORSOS:
      raise ValueError(f"Unknown torso {self.torso!r}; valid choices: {TORSOS}.")
    self.representation_torso = _Torso(self.hidden_sizes, self.torso, self.channels)
    self.representation_head = nn.Dense(self.latent_size)
    self.dynamics_torso = _Torso(self.hidden_sizes)
    self.dynamics_head = nn.Dense(self.latent_size)
    self.reward_head = nn.Dense(1)
    self.prediction_torso = _Torso(self.hidden_sizes)
    self.policy_head = nn.Dense(self.num_actions, kernel_init=nn.initializers.zeros)
    self.value_head = nn.Dense(1)

  def represent(self, obs: jax.Array) -> jax.Array:
    features = self.representation_torso(obs, self.obs_ndim)
    return _normalise(self.representation_head(features))

  def dynamics(self, latent: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
    x = jnp.concatenate([latent, jax.nn.one_hot(action, self.num_actions)], -1)
    features = self.dynamics_torso(x, 1)
    reward = jnp.tanh(self.reward_head(features)[..., 0])
    return _normalise(latent + self.dynamics_head(features)), reward

  def predict(self, latent: jax.Array) -> tuple[jax.Array, jax.Array]:
    features = self.prediction_torso(latent, 1)
    return self.policy_head(features), jnp.tanh(self.value_head(features)[..., 0])

  def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    latent = self.represent(obs)
    latent, reward = self.dynamics(latent, jnp.zeros(latent.shape[:-1], jnp.int32))
    logits, value = self.predict(latent)
    return logits, value, reward
