"""GRPO and PPO updates on 1, 2 and 8 devices (data-parallel and fsdp-sharded) equal the
single-device update; the shard_map and pmap wrappers agree.

tests/conftest.py gives the suite 8 host CPU devices (XLA_FLAGS, set before jax starts).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import learners
from rlagents import networks
from rlagents import parallel
from rlagents.learners import grpo
from rlagents.learners import ppo

# (data, fsdp) layouts: 1 device; 2 data; 2 fsdp; 8 data; 2 data x 4 fsdp.
LAYOUTS = [(1, 1), (2, 1), (1, 2), (8, 1), (2, 4)]
MIN_SIZE = 64  # so the tiny model's matrices really are split


def _mesh(data, fsdp):
  return parallel.make_mesh(parallel.MeshConfig(data=data, fsdp=fsdp),
                            jax.devices()[:data * fsdp])


def _close(a, b):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y),
                                                       rtol=2e-5, atol=2e-6), a, b)


@functools.lru_cache(maxsize=None)
def _grpo_setup():
  model = networks.Transformer(networks.TransformerConfig(
      vocab_size=16, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, max_len=24))
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), jnp.arange(8)[None])
  config = learners.GRPOConfig(group_size=4, prompts_per_step=4, kl_beta=0.1,
                               aggregation="token_mean", microbatch_size=0)
  rng = np.random.default_rng(0)
  n, length = 16, 24
  tokens = rng.integers(1, 16, size=(n, length)).astype(np.int32)
  # Uneven token counts per row, so shards weigh differently in the token mean.
  mask = (rng.random((n, length)) < np.linspace(0.2, 0.9, n)[:, None]).astype(np.float32)
  mask[:, :3] = 0
  batch = {"tokens": tokens, "loss_mask": mask,
           "old_logprobs": np.where(mask > 0, -2.0 + 0.1 * rng.standard_normal((n, length)),
                                    0.0).astype(np.float32),
           "rewards": rng.random(n).astype(np.float32)}
  state = learners.create_train_state(model, params, config.optimizer)
  reference, metrics = jax.jit(functools.partial(grpo.grpo_update, config=config))(
      state, params, {**batch, "advantages": grpo.grpo_advantages(batch, config)})
  return state, params, config, batch, reference.params, metrics


@pytest.mark.parametrize("data,fsdp", LAYOUTS)
def test_grpo_shard_map_equals_single_device(data, fsdp):
  state, params, config, batch, reference, ref_metrics = _grpo_setup()
  mesh = _mesh(data, fsdp)
  update = functools.partial(grpo.grpo_update, config=config)
  step = parallel.shard_map_update(update, mesh, num_state_args=2, min_size=MIN_SIZE)
  batch = {**batch, "advantages": np.asarray(grpo.grpo_advantages(batch, config))}
  placed = parallel.shard_state(state, mesh, min_size=MIN_SIZE)
  if fsdp > 1:  # the rules really split something, and the result stays split
    embed = max(jax.tree.leaves(placed.params), key=lambda x: x.size)
    assert embed.sharding.spec != jax.sharding.PartitionSpec()
  new, metrics = step(placed, parallel.shard_state(params, mesh, min_size=MIN_SIZE),
                      parallel.shard_batch(batch, mesh))
  if fsdp > 1:
    assert max(jax.tree.leaves(new.params), key=lambda x: x.size).sharding.spec == (
        embed.sharding.spec)
  _close(new.params, reference)
  np.testing.assert_allclose(metrics["grpo/loss"], ref_metrics["grpo/loss"], rtol=1e-5)
  np.testing.assert_allclose(metrics["grpo/grad_norm"], ref_metrics["grpo/grad_norm"], rtol=1e-4)


@pytest.mark.parametrize("num_devices", [1, 2, 8])
def test_grpo_pmap_equals_single_device(num_devices):
  state, params, config, batch, reference, _ = _grpo_setup()
  update = functools.partial(grpo.grpo_update, config=config)
  step = parallel.pmap_update(update, num_state_args=2, devices=jax.devices()[:num_devices])
  batch = {**batch, "advantages": np.asarray(grpo.grpo_advantages(batch, config))}
  new, _ = step(state, params, batch)
  _close(new.params, reference)


@functools.lru_cache(maxsize=None)
def _ppo_setup():
  config = ppo.PPOConfig(total_timesteps=4096, num_envs=4, num_steps=8, num_minibatches=2)
  learner = ppo.make_learner(config)
  state = learner.init(jax.random.key(0))
  rng = np.random.default_rng(1)
  m = 16
  batch = ppo.Minibatch(
      obs=rng.standard_normal((m, 4)).astype(np.float32),
      action=rng.integers(0, 2, m).astype(np.int32),
      logp=np.log(rng.uniform(0.3, 0.7, m)).astype(np.float32),
      value=rng.standard_normal(m).astype(np.float32),
      advantage=(2.0 + rng.standard_normal(m)).astype(np.float32),
      target=rng.standard_normal(m).astype(np.float32))
  update = ppo.make_minibatch_update(learner)
  train = (state.params, state.opt_state)
  (reference, _), _ = jax.jit(update)(train, batch)
  return update, train, batch, reference


@pytest.mark.parametrize("data,fsdp", LAYOUTS)
def test_ppo_shard_map_equals_single_device(data, fsdp):
  update, train, batch, reference = _ppo_setup()
  mesh = _mesh(data, fsdp)
  step = parallel.shard_map_update(update, mesh, min_size=MIN_SIZE)
  (params, _), metrics = step(parallel.shard_state(train, mesh, min_size=MIN_SIZE),
                              parallel.shard_batch(batch, mesh))
  _close(params, reference)
  assert np.isfinite(metrics["loss"])


@pytest.mark.parametrize("num_devices", [1, 2, 8])
def test_ppo_pmap_equals_shard_map(num_devices):
  update, train, batch, reference = _ppo_setup()
  (pmapped, _), _ = parallel.pmap_update(update, devices=jax.devices()[:num_devices])(train, batch)
  (mapped, _), _ = parallel.shard_map_update(update, _mesh(num_devices, 1))(train, batch)
  _close(pmapped, mapped)
  _close(pmapped, reference)


def test_indivisible_batch_is_a_clear_error():
  update, train, batch, _ = _ppo_setup()
  short = jax.tree.map(lambda x: x[:12], batch)
  with pytest.raises(ValueError, match=r"leading size 12, not divisible by the 8 devices"):
    parallel.shard_map_update(update, _mesh(8, 1))(train, short)
  with pytest.raises(ValueError, match="not divisible by the 8 devices"):
    parallel.shard_batch(short, _mesh(2, 4))


@pytest.mark.parametrize("kwargs,message", [
    ({"data": 0}, "MeshConfig.data must be >= 1 or -1"),
    ({"data": -1, "fsdp": -1}, "at most one of data and fsdp"),
])
def test_bad_mesh_config(kwargs, message):
  with pytest.raises(ValueError, match=message):
    parallel.MeshConfig(**kwargs)


def test_mesh_sizes():
  assert dict(parallel.make_mesh(parallel.MeshConfig(fsdp=2)).shape) == {"data": 4, "fsdp": 2}
  assert dict(parallel.make_mesh(parallel.MeshConfig(data=2, fsdp=-1)).shape) == {
      "data": 2, "fsdp": 4}
  with pytest.raises(ValueError, match="does not fit 8 devices"):
    parallel.make_mesh(parallel.MeshConfig(data=3))


def test_array_spec_rule():
  P = jax.sharding.PartitionSpec
  assert parallel.array_spec((512, 256), 4, min_size=1) == P("fsdp")           # largest dim
  assert parallel.array_spec((6, 512), 4, min_size=1) == P(None, "fsdp")
  assert parallel.array_spec((6, 10), 4, min_size=1) == P()                    # none divisible
  assert parallel.array_spec((256,), 4, min_size=1024) == P()                  # small: replicated
  assert parallel.array_spec((), 4, min_size=1) == P()
