"""MLP actor-critic for flat observations and discrete actions, in Flax linen.

Separate policy and value torsos (no shared features), orthogonal initialisation with gain
sqrt(2) in the hidden layers, 0.01 in the policy head (near-uniform initial policy) and 1 in the
value head, biases zero: the PPO defaults studied by Andrychowicz et al. 2021, "What Matters in
On-Policy Reinforcement Learning?", https://arxiv.org/abs/2006.05990, and Huang et al. 2022,
"The 37 Implementation Details of PPO".

Shapes: `...` any batch shape, `D` observation width, `A` actions.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {'tanh': jnp.tanh, 'relu': jax.nn.relu, 'gelu': jax.nn.gelu}


class MLP(nn.Module):
  """Dense layers, each followed by the activation; orthogonal init with gain sqrt(2).

  Attributes:
    hidden_sizes: width of each layer.
    activation: a name in `ACTIVATIONS`.
  """
  hidden_sizes: Sequence[int]
  activation: str = 'tanh'

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    if self.activation not in ACTIVATIONS:
      raise ValueError(f'Unknown activation {self.activation!r}; valid choices: '
                       f'{", ".join(repr(a) for a in ACTIVATIONS)}.')
    for size in self.hidden_sizes:
      x = nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)),
                   bias_init=nn.initializers.zeros)(x)
      x = ACTIVATIONS[self.activation](x)
    return x


class ActorCritic(nn.Module):
  """`obs [..., D] -> (logits [..., A], value [...])` with separate policy and value MLPs.

  Attributes:
    num_actions: A, the number of discrete actions.
    hidden_sizes: hidden widths of each torso.
    activation: a name in `ACTIVATIONS`.
  """
  num_actions: int
  hidden_sizes: Sequence[int] = (64, 64)
  activation: str = 'tanh'

  def setup(self):
    self.policy_torso = MLP(self.hidden_sizes, self.activation)
    self.policy_head = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01),
                                bias_init=nn.initializers.zeros)
    self.value_torso = MLP(self.hidden_sizes, self.activation)
    self.value_head = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0),
                               bias_init=nn.initializers.zeros)

  def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    return self.logits(obs), self.value(obs)

  def logits(self, obs: jax.Array) -> jax.Array:
    """The policy alone, `[..., D] -> [..., A]` unnormalised log-probabilities."""
    return self.policy_head(self.policy_torso(obs))

  def value(self, obs: jax.Array) -> jax.Array:
    """The critic alone, `[..., D] -> [...]` (e.g. to bootstrap from final observations)."""
    return self.value_head(self.value_torso(obs))[..., 0]
