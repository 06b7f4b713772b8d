"""A recurrent state-space model (RSSM) with categorical latents for vector observations.

Hafner et al. 2019, "Learning Latent Dynamics for Planning from Pixels"
(https://arxiv.org/abs/1811.04551), with DreamerV3's choices (https://arxiv.org/abs/2301.04104):
`S` categorical latents of `K` classes each, mixed with 1% uniform and sampled with
straight-through gradients; symlog inputs and targets; a two-hot reward head; a continue head;
KL balancing with free bits. Everything is pure: `WorldModel` holds the Flax module and the
settings, its methods take `params` and keys.

A model state (`RSSMState`) is the deterministic recurrent state `deter [..., H]` (a GRU's) and
the stochastic one `stoch [..., S, K]` (one-hot samples). One step:

    deter_t   = GRU(deter_{t-1}, [stoch_{t-1}, action_{t-1}])          transition
    prior     = p(stoch_t | deter_t)                                   dynamics predictor
    posterior = q(stoch_t | deter_t, encoder(obs_t))                   representation
    heads on features [deter_t, stoch_t]: decoder (symlog obs), reward (two-hot), continue

An episode's first observation is read from the zero state with a zero action (`start`).

Replay rows are transitions: row t of a sequence holds `obs` (o_t), `action` (a_t), `reward`
(r_t), `next_obs` (o_{t+1}, the true final observation where the episode ended), `terminal`
(o_{t+1} is terminal) and `first` (o_t starts an episode). The model reads o_t where a sequence or
an episode starts, and otherwise carries its posterior forward: from the state at o_t it predicts
the prior of o_{t+1} through a_t, reads o_{t+1} into the posterior, and its heads there predict
o_{t+1}, r_t and 1 - terminal. So terminal observations are trained without a separate row.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from jax import lax

from rlagents.world_models import _functions as F

Params = Any
Metrics = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorldModelConfig:
  """The RSSM's sizes and loss settings (DreamerV3's values where they carry over).

  Attributes:
    deter_size: H, the GRU's state width.
    num_latents: S, categorical latents.
    num_classes: K, classes per latent.
    hidden_size: width of every hidden layer (encoder, decoder, heads, transition).
    mlp_layers: hidden layers of the encoder, decoder and heads.
    unimix: the uniform share mixed into the latents' distributions.
    num_bins: two-hot bins of the reward head (symlog space, [-20, 20]).
    free_nats: free bits: KL (summed over latents) below this gives no gradient. 0 turns it off.
    dyn_scale: weight of the dynamics loss.
    rep_scale: weight of the representation loss.
    symlog_twohot: symlog observation targets and a two-hot reward head; False regresses raw
      observations and rewards with a squared error (the ablation).
  """
  deter_size: int = 128
  num_latents: int = 8
  num_classes: int = 8
  hidden_size: int = 128
  mlp_layers: int = 1
  unimix: float = 0.01
  num_bins: int = 255
  free_nats: float = 1.0
  dyn_scale: float = 0.5
  rep_scale: float = 0.1
  symlog_twohot: bool = True

  def __post_init__(self):
    for name in ("deter_size", "num_latents", "num_classes", "hidden_size", "mlp_layers"):
      if getattr(self, name) < 1:
        raise ValueError(f"WorldModelConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.num_classes < 2:
      raise ValueError(f"WorldModelConfig.num_classes must be >= 2, got {self.num_classes}")
    if not 0 <= self.unimix < 1:
      raise ValueError(f"WorldModelConfig.unimix must be in [0, 1), got {self.unimix}")
    if self.num_bins < 3 or self.num_bins % 2 == 0:
      raise ValueError(f"WorldModelConfig.num_bins must be odd and >= 3 (0 is a bin), got "
                       f"{self.num_bins}")
    for name in ("free_nats", "dyn_scale", "rep_scale"):
      if getattr(self, name) < 0:
        raise ValueError(f"WorldModelConfig.{name} must be >= 0, got {getattr(self, name)}")

  @property
  def feature_size(self) -> int:
    return self.deter_size + self.num_latents * self.num_classes


@flax.struct.dataclass
class RSSMState:
  """The model's state; any leading batch shape `...`.

  Attributes:
    deter: `[..., H]`, the recurrent state.
    stoch: `[..., S, K]`, one-hot samples of the categorical latents.
  """
  deter: jax.Array
  stoch: jax.Array

  @property
  def features(self) -> jax.Array:
    """`[..., H + S * K]`: what the heads, the actor and the critic read."""
    return jnp.concatenate([self.deter, self.stoch.reshape(*self.stoch.shape[:-2], -1)], -1)


@flax.struct.dataclass
class Sequences:
  """A batch of replayed transition sequences, `[B, L, ...]` each (see the module docstring).

  Attributes:
    obs: `[B, L, D]` float32, o_t.
    action: `[B, L]` int32, a_t.
    reward: `[B, L]` float32, r_t.
    next_obs: `[B, L, D]` float32, o_{t+1} (the final observation where the episode ended).
    terminal: `[B, L]` bool, o_{t+1} is terminal (not a time-limit cut).
    first: `[B, L]` bool, o_t is an episode's first observation.
  """
  obs: jax.Array
  action: jax.Array
  reward: jax.Array
  next_obs: jax.Array
  terminal: jax.Array
  first: jax.Array


class _Block(nn.Module):
  """Dense, LayerNorm, SiLU (DreamerV3's layer)."""
  size: int

  @nn.compact
  def __call__(self, x):
    return jax.nn.silu(nn.LayerNorm()(nn.Dense(self.size, use_bias=False)(x)))


class MLPHead(nn.Module):
  """`layers` x (Dense, LayerNorm, SiLU), then a dense output; `zero_init` starts the output
  at zero (DreamerV3's reward and critic heads).

  Attributes:
    size: output features.
    hidden: width of each block.
    layers: blocks before the output.
    zero_init: zero-initialise the output layer.
  """
  size: int
  hidden: int
  layers: int
  zero_init: bool = False

  @nn.compact
  def __call__(self, x):
    for _ in range(self.layers):
      x = _Block(self.hidden)(x)
    init = nn.initializers.zeros if self.zero_init else nn.initializers.lecun_normal()
    return nn.Dense(self.size, kernel_init=init)(x)


class RSSMNetworks(nn.Module):
  """The RSSM's networks; `WorldModel` calls them through `apply(..., method=...)`.

  Attributes:
    config: the sizes.
    obs_size: D, the observation width.
    num_actions: A, the discrete actions (the transition reads them one-hot).
    parent: Flax's module parent (set by Flax).
    name: Flax's module name (set by Flax).
  """
  config: WorldModelConfig
  obs_size: int
  num_actions: int

  def setup(self):
    c = self.config
    latent_size = c.num_latents * c.num_classes
    self.encoder = [_Block(c.hidden_size) for _ in range(c.mlp_layers)]
    self.transition_in = _Block(c.hidden_size)
    self.gru = nn.GRUCell(features=c.deter_size)
    self.prior_net = MLPHead(latent_size, c.hidden_size, 1)
    self.posterior_net = MLPHead(latent_size, c.hidden_size, 1)
    self.decoder = MLPHead(self.obs_size, c.hidden_size, c.mlp_layers)
    reward_size = c.num_bins if c.symlog_twohot else 1
    self.reward_head = MLPHead(reward_size, c.hidden_size, c.mlp_layers, zero_init=True)
    self.continue_head = MLPHead(1, c.hidden_size, c.mlp_layers)

  def _latent_logits(self, flat):
    c = self.config
    logits = flat.reshape(*flat.shape[:-1], c.num_latents, c.num_classes)
    return F.unimix_logits(logits, c.unimix)

  def encode(self, obs):
    """The embedding of `obs [..., D]` (symlog first) for the posterior."""
    x = F.symlog(obs) if self.config.symlog_twohot else obs
    for block in self.encoder:
      x = block(x)
    return x

  def transition(self, state: RSSMState, action):
    """`deter_t` from the previous state and the one-hot action."""
    x = jnp.concatenate([state.stoch.reshape(*state.stoch.shape[:-2], -1), action], -1)
    deter, _ = self.gru(state.deter, self.transition_in(x))
    return deter

  def prior(self, deter):
    """The dynamics predictor's latent log-probabilities `[..., S, K]` at `deter`."""
    return self._latent_logits(self.prior_net(deter))

  def posterior(self, deter, embed):
    """The representation's latent log-probabilities `[..., S, K]` from `deter` and `embed`."""
    return self._latent_logits(self.posterior_net(jnp.concatenate([deter, embed], -1)))

  def heads(self, features):
    """`(decoded obs, reward logits or value, continue logit)` at `features`."""
    return (self.decoder(features), self.reward_head(features),
            self.continue_head(features)[..., 0])

  def init_all(self, obs, action):
    """Touches every network once, for `init`."""
    c = self.config
    state = RSSMState(jnp.zeros(obs.shape[:-1] + (c.deter_size,)),
                      jnp.zeros(obs.shape[:-1] + (c.num_latents, c.num_classes)))
    deter = self.transition(state, action)
    self.prior(deter)
    logits = self.posterior(deter, self.encode(obs))
    return self.heads(RSSMState(deter, jax.nn.softmax(logits)).features)


def _gumbel(key: jax.Array, batch_shape: tuple[int, ...],
            shape: tuple[int, ...]) -> jax.Array:
  """Gumbel noise `[*shape, *batch_shape...]`-ordered as `[shape[0], *batch_shape, *shape[1:]]`.

  `key` is one key, or one key per batch element (`[*batch_shape]`): then each element's noise
  comes from its own key, so a batch split across devices draws the same numbers as one device.
  """
  if key.shape == ():
    noise = jax.random.gumbel(key, (shape[0], *batch_shape, *shape[1:]))
    return noise
  if key.shape != batch_shape:
    raise ValueError(f"keys must be one key or one per batch element {batch_shape}, got "
                     f"{key.shape}")
  flat_keys = key.reshape(-1)
  noise = jax.vmap(lambda k: jax.random.gumbel(k, shape))(flat_keys)  # [N, *shape]
  noise = noise.reshape(*batch_shape, *shape)
  return jnp.moveaxis(noise, len(batch_shape), 0)


def _onehot_sample(logits: jax.Array, noise: jax.Array) -> jax.Array:
  """Gumbel-max one-hot sample of `logits` with `noise` of the same shape, straight through."""
  probs = jax.nn.softmax(logits, axis=-1)
  sample = jax.nn.one_hot(jnp.argmax(logits + noise, -1), logits.shape[-1], dtype=probs.dtype)
  return sample + probs - lax.stop_gradient(probs)


@dataclasses.dataclass(frozen=True, eq=False)
class WorldModel:
  """An RSSM world model of an environment with `obs_size`-wide observations and discrete actions.

    model = WorldModel(WorldModelConfig(), obs_size=4, num_actions=2)
    params = model.init(key)
    loss, (metrics, posterior) = model.loss(params, sequences, keys)   # keys: one per sequence
    states, actions = model.imagine(params, posterior_start, policy, key, horizon=15)

  Attributes:
    config: the sizes and loss settings.
    obs_size: D, the observation width.
    num_actions: A, the discrete actions.
  """
  config: WorldModelConfig
  obs_size: int
  num_actions: int

  def __post_init__(self):
    if self.obs_size < 1 or self.num_actions < 1:
      raise ValueError(f"WorldModel needs obs_size >= 1 and num_actions >= 1, got "
                       f"{self.obs_size} and {self.num_actions}")

  @property
  def networks(self) -> RSSMNetworks:
    return RSSMNetworks(self.config, self.obs_size, self.num_actions)

  @property
  def bins(self) -> jax.Array:
    return F.symlog_bins(self.config.num_bins)

  def init(self, key: jax.Array) -> Params:
    """The networks' parameters."""
    return self.networks.init(key, jnp.zeros((1, self.obs_size)),
                              jnp.zeros((1, self.num_actions)), method=RSSMNetworks.init_all)

  def initial_state(self, batch_shape: tuple[int, ...] = ()) -> RSSMState:
    """The zero state an episode's first observation is read from."""
    c = self.config
    return RSSMState(jnp.zeros((*batch_shape, c.deter_size)),
                     jnp.zeros((*batch_shape, c.num_latents, c.num_classes)))

  def _apply(self, params, method, *args):
    return self.networks.apply(params, *args, method=method)

  def _action(self, action: jax.Array) -> jax.Array:
    return jax.nn.one_hot(action, self.num_actions)

  def observe_step(self, params: Params, state: RSSMState, action: jax.Array, obs: jax.Array,
                   noise: jax.Array) -> tuple[RSSMState, jax.Array, jax.Array]:
    """Reads `obs` after `action` from `state`: `(posterior state, posterior logits, prior logits)`.

    Args:
      params: the parameters.
      state: `[...]` the state before the action.
      action: `[...]` int actions.
      obs: `[..., D]` the observation that followed.
      noise: `[..., S, K]` Gumbel noise for the posterior sample.
    """
    deter = self._apply(params, RSSMNetworks.transition, state, self._action(action))
    embed = self._apply(params, RSSMNetworks.encode, obs)
    post_logits = self._apply(params, RSSMNetworks.posterior, deter, embed)
    prior_logits = self._apply(params, RSSMNetworks.prior, deter)
    return RSSMState(deter, _onehot_sample(post_logits, noise)), post_logits, prior_logits

  def start(self, params: Params, obs: jax.Array, noise: jax.Array) -> RSSMState:
    """The posterior at an episode's first observation `obs [..., D]` (zero state, zero action).

    Args:
      params: the parameters.
      obs: `[..., D]`.
      noise: `[..., S, K]` Gumbel noise for the sample.
    """
    batch = obs.shape[:-1]
    zero = self.initial_state(batch)
    deter = self._apply(params, RSSMNetworks.transition, zero,
                        jnp.zeros((*batch, self.num_actions)))
    embed = self._apply(params, RSSMNetworks.encode, obs)
    logits = self._apply(params, RSSMNetworks.posterior, deter, embed)
    return RSSMState(deter, _onehot_sample(logits, noise))

  def imagine_step(self, params: Params, state: RSSMState, action: jax.Array,
                   noise: jax.Array) -> RSSMState:
    """The next state under the prior after `action` (no observation).

    Args:
      params: the parameters.
      state: `[...]`.
      action: `[...]` int.
      noise: `[..., S, K]` Gumbel noise for the prior sample.
    """
    deter = self._apply(params, RSSMNetworks.transition, state, self._action(action))
    logits = self._apply(params, RSSMNetworks.prior, deter)
    return RSSMState(deter, _onehot_sample(logits, noise))

  def predict(self, params: Params, state: RSSMState) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`(obs [..., D], reward [...], continue probability [...])` decoded at `state`."""
    obs, reward, cont = self._apply(params, RSSMNetworks.heads, state.features)
    if self.config.symlog_twohot:
      obs = F.symexp(obs)
      reward = F.twohot_mean(reward, self.bins)
    else:
      reward = reward[..., 0]
    return obs, reward, jax.nn.sigmoid(cont)

  def latent_noise(self, key: jax.Array, batch_shape: tuple[int, ...],
                   steps: int) -> jax.Array:
    """`[steps, *batch_shape, S, K]` Gumbel noise for `steps` latent samples of a batch.

    `key` is one key or one per batch element (`[*batch_shape]`).
    """
    c = self.config
    return _gumbel(key, batch_shape, (steps, c.num_latents, c.num_classes))

  def observe(self, params: Params, batch: Sequences,
              keys: jax.Array) -> tuple[RSSMState, jax.Array, jax.Array]:
    """Filters `batch` through the model: posterior states at o_{t+1} and both latents' logits.

    The state is (re)started from o_t where `first` or at a sequence's first row.

    Args:
      params: the parameters.
      batch: `[B, L, ...]` transition sequences.
      keys: `[B]` one PRNG key per sequence (or one key).

    Returns:
      `(posterior [B, L], posterior logits [B, L, S, K], prior logits [B, L, S, K])`.
    """
    num_seq, length = batch.action.shape
    time_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch)
    noise = self.latent_noise(keys, (num_seq,), 2 * length)
    start_noise, step_noise = noise[:length], noise[length:]
    # The posterior at o_t as if it started an episode; used where it does (cheap: one batch).
    starts = self.start(params, time_major.obs, start_noise)
    restart = time_major.first.at[0].set(True)

    def step(state, inputs):
      start, restart_t, action, next_obs, noise_t = inputs
      state = jax.tree.map(
          lambda fresh, old: jnp.where(restart_t.reshape(-1, *[1] * (old.ndim - 1)), fresh, old),
          start, state)
      post, post_logits, prior_logits = self.observe_step(params, state, action, next_obs,
                                                          noise_t)
      return post, (post, post_logits, prior_logits)

    _, (post, post_logits, prior_logits) = lax.scan(
        step, self.initial_state((num_seq,)),
        (starts, restart, time_major.action, time_major.next_obs, step_noise))
    swap = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731
    return jax.tree.map(swap, post), swap(post_logits), swap(prior_logits)

  def loss(self, params: Params, batch: Sequences,
           keys: jax.Array) -> tuple[jax.Array, tuple[Metrics, RSSMState]]:
    """The world-model loss on `batch`: prediction + dyn_scale * dyn + rep_scale * rep.

    Prediction: the decoder's squared error to symlog(o_{t+1}) summed over dimensions, the
    reward head's two-hot cross-entropy to r_t, the continue head's binary cross-entropy to
    1 - terminal; means over `[B, L]`.

    Args:
      params: the parameters.
      batch: `[B, L, ...]` transition sequences.
      keys: `[B]` one PRNG key per sequence (or one key).

    Returns:
      `(loss, (metrics, posterior [B, L]))`, the posterior states (at o_{t+1}) with gradients
      stopped, where imagination starts.
    """
    c = self.config
    post, post_logits, prior_logits = self.observe(params, batch, keys)
    decoded, reward_out, cont_logit = self._apply(params, RSSMNetworks.heads, post.features)
    if c.symlog_twohot:
      obs_loss = jnp.square(decoded - F.symlog(batch.next_obs)).sum(-1)
      reward_loss = F.twohot_loss(reward_out, batch.reward, self.bins)
    else:
      obs_loss = jnp.square(decoded - batch.next_obs).sum(-1)
      reward_loss = jnp.square(reward_out[..., 0] - batch.reward)
    cont_target = 1.0 - batch.terminal.astype(jnp.float32)
    cont_loss = (jnp.maximum(cont_logit, 0) - cont_logit * cont_target
                 + jnp.log1p(jnp.exp(-jnp.abs(cont_logit))))
    dyn, rep, kl = F.kl_balance_losses(post_logits, prior_logits, free_nats=c.free_nats)
    loss = (obs_loss + reward_loss + cont_loss + c.dyn_scale * dyn + c.rep_scale * rep).mean()
    metrics = {"wm_loss": loss, "obs_loss": obs_loss.mean(), "reward_loss": reward_loss.mean(),
               "continue_loss": cont_loss.mean(), "kl": kl.mean()}
    return loss, (metrics, jax.tree.map(lax.stop_gradient, post))

  def imagine(self, params: Params, start_state: RSSMState,
              policy: Callable[[jax.Array], jax.Array], key: jax.Array,
              horizon: int) -> tuple[RSSMState, jax.Array]:
    """Rolls the prior forward `horizon` steps from `start_state` under `policy` (`lax.scan`).

    Args:
      params: the world model's parameters (not differentiated: imagination is a simulator).
      start_state: `[N]` states to start from.
      policy: `features [N, F] -> action logits [N, A]`; actions are sampled from them.
      key: one PRNG key, or `[N]` keys (one per start, so a split batch draws alike).
      horizon: steps to imagine.

    Returns:
      `(states [horizon + 1, N], actions [horizon, N])`: the start and the imagined states, and
      the action taken in each of the first `horizon`.
    """
    params = lax.stop_gradient(params)
    num = start_state.deter.shape[:-1]
    latent_noise = self.latent_noise(key, num, horizon)
    action_noise = _gumbel(jax.random.fold_in(key, 1) if key.shape == () else
                           jax.vmap(lambda k: jax.random.fold_in(k, 1))(key.reshape(-1)).reshape(
                               key.shape), num, (horizon, self.num_actions))

    def step(state, inputs):
      latent_noise_t, action_noise_t = inputs
      logits = policy(lax.stop_gradient(state.features))
      action = jnp.argmax(logits + action_noise_t, -1)
      next_state = self.imagine_step(params, state, action, latent_noise_t)
      return next_state, (next_state, action)

    _, (states, actions) = lax.scan(step, start_state, (latent_noise, action_noise))
    states = jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]),
                          start_state, states)
    return states, actions
