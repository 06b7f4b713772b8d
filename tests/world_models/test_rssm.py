"""The RSSM: shapes, episode restarts, imagination, learning one-step dynamics, the simulator env."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import envs
from rlagents import world_models as wm

TINY = wm.WorldModelConfig(deter_size=16, num_latents=4, num_classes=4, hidden_size=16,
                           num_bins=31)


def _sequences(key, batch=3, length=5, obs_size=4, num_actions=2):
  keys = jax.random.split(key, 4)
  return wm.Sequences(
      obs=jax.random.normal(keys[0], (batch, length, obs_size)),
      action=jax.random.randint(keys[1], (batch, length), 0, num_actions),
      reward=jax.random.normal(keys[2], (batch, length)),
      next_obs=jax.random.normal(keys[3], (batch, length, obs_size)),
      terminal=jnp.zeros((batch, length), bool), first=jnp.zeros((batch, length), bool))


@jax.jit
def _shapes_run(params, batch, keys):
  model = wm.WorldModel(TINY, obs_size=4, num_actions=2)
  loss, (metrics, post) = model.loss(params, batch, keys)
  _, post_logits, prior_logits = model.observe(params, batch, keys)
  start = jax.tree.map(lambda x: x.reshape(15, *x.shape[2:]), post)
  states, actions = model.imagine(params, start, lambda f: jnp.zeros((*f.shape[:-1], 2)),
                                  jax.random.key(3), 7)
  return loss, metrics, post, post_logits, prior_logits, start, states, actions, model.predict(
      params, states)


def test_shapes_of_loss_observe_and_imagine():
  model = wm.WorldModel(TINY, obs_size=4, num_actions=2)
  params = model.init(jax.random.key(0))
  batch = _sequences(jax.random.key(1))
  keys = jax.random.split(jax.random.key(2), 3)
  (loss, metrics, post, post_logits, prior_logits, start, states, actions,
   (obs, reward, cont)) = _shapes_run(params, batch, keys)
  assert loss.shape == () and np.isfinite(loss)
  assert set(metrics) == {"wm_loss", "obs_loss", "reward_loss", "continue_loss", "kl"}
  assert post.deter.shape == (3, 5, 16) and post.stoch.shape == (3, 5, 4, 4)
  assert post.features.shape == (3, 5, TINY.feature_size) == (3, 5, 16 + 16)
  np.testing.assert_allclose(post.stoch.sum(-1), 1.0, atol=1e-6)  # one-hot samples
  assert post_logits.shape == prior_logits.shape == (3, 5, 4, 4)
  assert states.deter.shape == (8, 15, 16) and actions.shape == (7, 15)
  np.testing.assert_array_equal(states.deter[0], start.deter)
  assert obs.shape == (8, 15, 4) and reward.shape == cont.shape == (8, 15)


def test_first_flag_restarts_the_state():
  """Rows before an episode's first observation do not affect the posterior from there on."""
  model = wm.WorldModel(TINY, obs_size=4, num_actions=2)
  params = model.init(jax.random.key(0))
  batch = _sequences(jax.random.key(1)).replace(first=jnp.zeros((3, 5), bool).at[:, 2].set(True))
  other = batch.replace(obs=batch.obs.at[:, :2].add(5.0),
                        next_obs=batch.next_obs.at[:, :2].add(5.0),
                        action=batch.action.at[:, :2].set(1 - batch.action[:, :2]))
  keys = jax.random.split(jax.random.key(2), 3)
  observe = jax.jit(model.observe)
  post_a, _, _ = observe(params, batch, keys)
  post_b, _, _ = observe(params, other, keys)
  np.testing.assert_allclose(post_a.deter[:, 2:], post_b.deter[:, 2:], atol=1e-6)
  assert np.abs(post_a.deter[:, :2] - post_b.deter[:, :2]).max() > 1e-3


def test_per_sequence_keys_give_the_same_draws_when_split():
  """One key per sequence: half the batch draws what it drew inside the whole batch."""
  model = wm.WorldModel(TINY, obs_size=4, num_actions=2)
  params = model.init(jax.random.key(0))
  batch = _sequences(jax.random.key(1), batch=4)
  keys = jax.random.split(jax.random.key(2), 4)
  observe = jax.jit(model.observe)
  whole, _, _ = observe(params, batch, keys)
  half, _, _ = observe(params, jax.tree.map(lambda x: x[2:], batch), keys[2:])
  np.testing.assert_allclose(whole.stoch[2:], half.stoch, atol=1e-6)


def _cartpole_data(key, num_steps=128, num_envs=16):
  """Random-policy CartPole transitions in the replay layout, `[num_envs, num_steps]`."""
  env = envs.EpisodeStatistics(envs.AutoReset(envs.CartPole()))
  state, obs = jax.vmap(env.reset)(jax.random.split(key, num_envs))

  def step(carry, key):
    state, obs, first = carry
    action_key, step_key = jax.random.split(key)
    action = jax.random.randint(action_key, (num_envs,), 0, 2)
    state, next_obs, reward, done, info = jax.vmap(env.step)(
        state, action, jax.random.split(step_key, num_envs))
    row = wm.Sequences(obs, action, reward, info["final_obs"], done & ~info["truncated"], first)
    return (state, next_obs, done), row

  _, rows = jax.lax.scan(step, (state, obs, jnp.ones(num_envs, bool)),
                         jax.random.split(key, num_steps))
  return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), rows)


@pytest.mark.slow  # 200 model steps: ~20 s alone, minutes on a loaded 2-core CPU
def test_learns_cartpole_one_step_dynamics():
  """A few hundred steps on random CartPole data: the loss falls and terminal steps are told."""
  import optax  # pylint: disable=g-import-not-at-top
  model = wm.WorldModel(wm.WorldModelConfig(deter_size=32, hidden_size=32, num_bins=63),
                        obs_size=4, num_actions=2)
  data = _cartpole_data(jax.random.key(0))
  params = model.init(jax.random.key(1))
  optimizer = optax.adam(3e-3)

  def chunk(carry, key):
    params, opt_state = carry
    start_key, loss_key = jax.random.split(key)
    start = jax.random.randint(start_key, (), 0, 128 - 32)
    batch = jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, start, 32, axis=1), data)
    (loss, (metrics, _)), grads = jax.value_and_grad(model.loss, has_aux=True)(
        params, batch, jax.random.split(loss_key, 16))
    updates, opt_state = optimizer.update(grads, opt_state)
    return (optax.apply_updates(params, updates), opt_state), metrics

  (params, _), metrics = jax.jit(lambda c, k: jax.lax.scan(chunk, c, k))(
      (params, optimizer.init(params)), jax.random.split(jax.random.key(2), 200))
  first, last = jax.tree.map(lambda x: float(x[:10].mean()), metrics), jax.tree.map(
      lambda x: float(x[-10:].mean()), metrics)
  assert last["wm_loss"] < 0.5 * first["wm_loss"], (first, last)
  assert last["obs_loss"] < 0.1 * first["obs_loss"], (first, last)  # symlog squared error
  assert last["reward_loss"] < 0.5, last  # the reward is always 1
  # The continue head separates terminal transitions from the others.
  _, _, cont = jax.jit(lambda p: model.predict(p, model.observe(
      p, data, jax.random.split(jax.random.key(3), 16))[0]))(params)
  terminal = np.asarray(data.terminal)
  assert terminal.sum() > 20
  at_end, elsewhere = float(cont[terminal].mean()), float(cont[~terminal].mean())
  assert at_end < elsewhere - 0.1 and elsewhere > 0.9, (at_end, elsewhere)


def test_world_model_env_is_an_environment():
  model = wm.WorldModel(TINY, obs_size=4, num_actions=2)
  params = model.init(jax.random.key(0))
  sim = wm.WorldModelEnv(model, params, jnp.zeros((3, 4)), max_episode_steps=5)
  envs.check_environment(sim)
  state, obs = sim.reset(jax.random.key(1))
  np.testing.assert_array_equal(obs, np.zeros(4))
  # An untrained continue head (logit ~0) with a threshold of 0.99: every step terminates.
  eager = wm.WorldModelEnv(model, params, jnp.zeros((3, 4)), continue_threshold=0.99)
  _, _, _, done, info = eager.step(state, jnp.int32(1), jax.random.key(2))
  assert bool(done) and not bool(info["truncated"])
  # By default each step ends with the predicted probability 1 - continue.
  sampled = wm.WorldModelEnv(model, params, jnp.zeros((3, 4)))
  keys = jax.random.split(jax.random.key(4), 2000)
  ends = jax.jit(jax.vmap(lambda k: sampled.step(state, jnp.int32(1), k)[3]))(keys)
  next_state = model.imagine_step(params, state.model_state, jnp.int32(1),
                                  model.latent_noise(jax.random.key(5), (), 1)[0])
  end_probability = 1.0 - float(model.predict(params, next_state)[2])
  assert 0.05 < end_probability < 0.95  # an untrained head: ends are neither sure nor impossible
  assert abs(float(ends.mean()) - end_probability) < 0.1, (float(ends.mean()), end_probability)
  # Threshold tiny: only the time limit ends an episode, as a truncation.
  late = wm.WorldModelEnv(model, params, jnp.zeros((3, 4)), max_episode_steps=3,
                          continue_threshold=1e-6)
  step = jax.jit(late.step)
  for t in range(3):
    state, obs, reward, done, info = step(state, jnp.int32(t % 2), jax.random.key(t))
  assert bool(done) and bool(info["truncated"]) and obs.shape == (4,)
  # The training stack runs it (PPO trains inside a trained model in tests/learners/
  # test_dreamer.py, slow).
  batch = envs.wrap_for_training(sim, 2)
  state, obs = batch.reset(jax.random.key(0))
  _, obs, reward, done, info = jax.jit(batch.step)(state, jnp.array([0, 1]), jax.random.key(1))
  assert obs.shape == (2, 4) and reward.shape == (2,) and info["episode_length"].tolist() == [1, 1]


def test_bad_settings_name_the_problem():
  with pytest.raises(ValueError, match="num_bins"):
    wm.WorldModelConfig(num_bins=64)
  with pytest.raises(ValueError, match="unimix"):
    wm.WorldModelConfig(unimix=1.0)
  with pytest.raises(ValueError, match="num_classes"):
    wm.WorldModelConfig(num_classes=1)
  model = wm.WorldModel(TINY, obs_size=4, num_actions=2)
  with pytest.raises(ValueError, match="start_obs"):
    wm.WorldModelEnv(model, None, jnp.zeros((3, 5)))
  with pytest.raises(ValueError, match="continue_threshold"):
    wm.WorldModelEnv(model, None, jnp.zeros((3, 4)), continue_threshold=1.0)
  with pytest.raises(ValueError, match="one key or one per batch"):
    model.latent_noise(jax.random.split(jax.random.key(0), 3), (4,), 2)
