"""GRPO, SFT and PPO updates on 1, 2 and 8 devices (data-parallel and fsdp) equal the
single-device update; fsdp keeps parameters and optimizer state sharded and gathers only the
parameters; `make_update_step` places its inputs once; the shard_map and pmap wrappers agree.

tests/conftest.py gives the suite 8 host CPU devices (XLA_FLAGS, set before jax starts).
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlagents import learners
from rlagents import networks
from rlagents import parallel
from rlagents.learners import grpo
from rlagents.learners import ppo
from rlagents.learners import sft

P = jax.sharding.PartitionSpec
# (data, fsdp) layouts: 1 device; 2 data; 2 fsdp; 8 data; 2 data x 4 fsdp.
LAYOUTS = [(1, 1), (2, 1), (1, 2), (8, 1), (2, 4)]
MIN_SIZE = 64  # so the tiny models' matrices really are split
# No warm-up (a first step at learning rate 0 would leave the parameters unchanged) and a clip
# below the gradient norm, so the global-norm clip acts and must see the norm of every shard.
OPTIMIZER = learners.OptimizerConfig(learning_rate=1e-3, max_grad_norm=0.05)


def _mesh(data, fsdp):
  return parallel.make_mesh(parallel.MeshConfig(data=data, fsdp=fsdp),
                            jax.devices()[:data * fsdp])


def _close(a, b, atol=2e-6):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y),
                                                       rtol=2e-5, atol=atol), a, b)


# Adam's first step moves each parameter by about lr * g / (|g| + eps): where a gradient entry is
# near zero, summing it in another order (per shard, then across shards) changes the step by a
# visible fraction of lr although the gradients agree to ~1e-9 (the optimizer state below is
# compared at the tight tolerance). Parameters are therefore compared to 1% of one step.
PARAMS_ATOL = 1e-2 * OPTIMIZER.learning_rate


def _changed(new, old):
  """The step really moved the parameters (so equal results are not equal no-ops)."""
  moved = max(float(np.abs(np.asarray(x) - np.asarray(y)).max())
              for x, y in zip(jax.tree.leaves(new), jax.tree.leaves(old)))
  assert moved > 1e-4, moved


def _assert_sharded_like_rules(tree, mesh):
  """Every leaf is stored as the rules say, and with fsdp > 1 some leaves really are split."""
  specs = parallel.state_specs(tree, mesh, min_size=MIN_SIZE)
  leaves, spec_leaves = jax.tree.leaves(tree), jax.tree.leaves(specs)
  for x, spec in zip(leaves, spec_leaves):
    assert x.sharding.is_equivalent_to(jax.sharding.NamedSharding(mesh, spec), x.ndim)
  if mesh.shape["fsdp"] > 1:
    split = [x for x, s in zip(leaves, spec_leaves) if s != P()]
    assert split
    assert all(x.addressable_shards[0].data.size * mesh.shape["fsdp"] == x.size for x in split)


def _model():
  return networks.Transformer(networks.TransformerConfig(
      vocab_size=16, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, max_len=24))


def _token_batch(n=16, length=24, seed=0):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(1, 16, size=(n, length)).astype(np.int32)
  # Uneven token counts per row, so shards weigh differently in the token mean.
  mask = (rng.random((n, length)) < np.linspace(0.2, 0.9, n)[:, None]).astype(np.float32)
  mask[:, :3] = 0
  return rng, {"tokens": tokens, "loss_mask": mask}


@functools.lru_cache(maxsize=None)
def _grpo_setup():
  model = _model()
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), jnp.arange(8)[None])
  config = learners.GRPOConfig(group_size=4, prompts_per_step=4, kl_beta=0.1,
                               aggregation="token_mean", microbatch_size=0, optimizer=OPTIMIZER)
  rng, batch = _token_batch()
  mask = batch["loss_mask"]
  batch["old_logprobs"] = np.where(mask > 0, -2.0 + 0.1 * rng.standard_normal(mask.shape),
                                   0.0).astype(np.float32)
  batch["rewards"] = rng.random(len(mask)).astype(np.float32)
  batch["advantages"] = np.asarray(grpo.grpo_advantages(batch, config))
  state = learners.create_train_state(model, params, config.optimizer)
  reference, metrics = jax.jit(functools.partial(grpo.grpo_update, config=config))(
      state, params, batch)
  _changed(reference.params, params)
  assert metrics["grpo/grad_norm"] > OPTIMIZER.max_grad_norm  # the clip acts
  return state, params, config, batch, reference, metrics


@pytest.mark.parametrize("data,fsdp", LAYOUTS)
def test_grpo_split_update_equals_single_device(data, fsdp):
  state, params, config, batch, reference, ref_metrics = _grpo_setup()
  mesh = _mesh(data, fsdp)
  step = parallel.make_update_step(grpo.grpo_split_update(config), mesh, num_state_args=2,
                                   min_size=MIN_SIZE)
  new, metrics = step(state, params, batch)
  _close(new.params, reference.params, atol=PARAMS_ATOL)
  _close(new.opt_state, reference.opt_state)
  for name in ("grpo/loss", "grpo/kl", "grpo/grad_norm", "grpo/advantage_abs_mean"):
    np.testing.assert_allclose(metrics[name], ref_metrics[name], rtol=1e-5, err_msg=name)
  if data * fsdp > 1:
    # Parameters and optimizer state stay stored as the rules split them.
    _assert_sharded_like_rules(new.params, mesh)
    _assert_sharded_like_rules(new.opt_state, mesh)


def _count(op, hlo_text):
  return len(re.findall(rf"\b{op}(?:-start)?\(", hlo_text))


def test_fsdp_gathers_only_parameters_and_reduce_scatters_gradients():
  state, params, config, batch, _, _ = _grpo_setup()
  mesh = _mesh(2, 4)
  step = parallel.make_update_step(grpo.grpo_split_update(config), mesh, num_state_args=2,
                                   min_size=MIN_SIZE)
  placed_state, placed_ref = step.place(state, params)
  hlo = step._step.lower(placed_state, placed_ref,  # pylint: disable=protected-access
                         parallel.shard_batch(batch, mesh)).compile().as_text()
  split_params = sum(s != P() for s in jax.tree.leaves(
      parallel.state_specs(params, mesh, min_size=MIN_SIZE)))
  assert split_params >= 4
  # One gather per split array of the parameters and of the KL reference, none for Adam's two
  # moments (gathering the whole state would be at least twice as many).
  assert 0 < _count("all-gather", hlo) <= 2 * split_params
  assert _count("reduce-scatter", hlo) >= 1


@pytest.mark.parametrize("data,fsdp", [(2, 4)])
def test_grpo_plain_update_equals_single_device(data, fsdp):
  # A plain update (no split parts) with fsdp goes to jit's partitioner (data only: shard_map,
  # as in test_ppo_pmap_equals_shard_map).
  state, params, config, batch, reference, ref_metrics = _grpo_setup()
  mesh = _mesh(data, fsdp)
  step = parallel.shard_map_update(functools.partial(grpo.grpo_update, config=config), mesh,
                                   num_state_args=2, min_size=MIN_SIZE)
  placed = parallel.shard_state(state, mesh, min_size=MIN_SIZE)
  new, metrics = step(placed, parallel.shard_state(params, mesh, min_size=MIN_SIZE),
                      parallel.shard_batch(batch, mesh))
  _close(new.params, reference.params, atol=PARAMS_ATOL)
  _assert_sharded_like_rules(new.opt_state, mesh)
  np.testing.assert_allclose(metrics["grpo/grad_norm"], ref_metrics["grpo/grad_norm"], rtol=1e-4)


@pytest.mark.parametrize("num_devices", [8])
def test_grpo_pmap_equals_single_device(num_devices):
  state, params, config, batch, reference, _ = _grpo_setup()
  step = parallel.pmap_update(grpo.grpo_split_update(config), num_state_args=2,
                              devices=jax.devices()[:num_devices])
  new, _ = step(state, params, batch)
  _close(new.params, reference.params, atol=PARAMS_ATOL)


@functools.lru_cache(maxsize=None)
def _sft_setup():
  model = _model()
  params = model.init(jax.random.PRNGKey(1), jnp.zeros((1, 8), jnp.int32), jnp.arange(8)[None])
  _, batch = _token_batch(seed=1)
  state = learners.create_train_state(model, params, OPTIMIZER)
  reference, metrics = jax.jit(sft.sft_update)(state, batch)
  _changed(reference.params, params)
  return state, batch, reference, metrics


@pytest.mark.parametrize("data,fsdp", [(1, 2), (2, 4)])
def test_sft_split_update_equals_single_device(data, fsdp):
  state, batch, reference, ref_metrics = _sft_setup()
  mesh = _mesh(data, fsdp)
  step = parallel.make_update_step(sft.sft_split_update(), mesh, min_size=MIN_SIZE)
  new, metrics = step(state, batch)
  _close(new.params, reference.params, atol=PARAMS_ATOL)
  _assert_sharded_like_rules(new.opt_state, mesh)
  for name in ("sft/nll", "sft/tokens", "sft/grad_norm"):
    np.testing.assert_allclose(metrics[name], ref_metrics[name], rtol=1e-5, err_msg=name)


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
  (reference, _), metrics = jax.jit(update)(train, batch)
  _changed(reference, state.params)
  return learner, update, train, batch, reference, metrics


@pytest.mark.parametrize("data,fsdp", [(1, 1), (1, 2), (2, 4)])
def test_ppo_split_update_equals_single_device(data, fsdp):
  learner, _, train, batch, reference, ref_metrics = _ppo_setup()
  mesh = _mesh(data, fsdp)
  step = parallel.make_update_step(ppo.make_split_minibatch_update(learner), mesh,
                                   min_size=MIN_SIZE)
  (params, opt_state), metrics = step(train, batch)
  _close(params, reference)
  np.testing.assert_allclose(metrics["loss"], ref_metrics["loss"], rtol=1e-5)
  np.testing.assert_allclose(metrics["grad_norm"], ref_metrics["grad_norm"], rtol=1e-5)
  if fsdp > 1:
    _assert_sharded_like_rules(params, mesh)
  # PPO's Adam runs on the flattened parameters (one odd-sized vector): replicated by the rules.
  assert all(x.sharding.is_fully_replicated for x in jax.tree.leaves(opt_state))


@pytest.mark.parametrize("num_devices", [8])
def test_ppo_pmap_equals_shard_map(num_devices):
  _, update, train, batch, reference, _ = _ppo_setup()
  (pmapped, _), _ = parallel.pmap_update(update, devices=jax.devices()[:num_devices])(train, batch)
  (mapped, _), _ = parallel.shard_map_update(update, _mesh(num_devices, 1))(train, batch)
  _close(pmapped, mapped)
  _close(pmapped, reference)


def test_make_update_step_places_the_state_once(monkeypatch):
  learner, _, train, batch, reference, _ = _ppo_setup()
  step = parallel.make_update_step(ppo.make_split_minibatch_update(learner),
                                   parallel.MeshConfig(data=2, fsdp=4, fsdp_min_size=MIN_SIZE))
  assert dict(step.mesh.shape) == {"data": 2, "fsdp": 4}
  placements = []
  shard_state = parallel.shard_state
  monkeypatch.setattr(parallel._sharding, "shard_state",  # pylint: disable=protected-access
                      lambda *a, **k: placements.append(1) or shard_state(*a, **k))
  first, _ = step(train, batch)
  assert len(placements) == 1
  # The returned state is already laid out: placing it again keeps the very same arrays.
  (again,) = step.place(first)
  assert all(a is b for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(first)))
  second, _ = step(first, batch)
  assert len(placements) == 2  # the explicit place() above; the step recognised its own output
  two_steps = jax.jit(ppo.make_minibatch_update(learner))
  (expected, _), _ = two_steps(two_steps(train, batch)[0], batch)
  _close(second[0], expected)
  del reference


def test_make_update_step_on_one_device_is_the_plain_update():
  state, batch, reference, _ = _sft_setup()
  step = parallel.make_update_step(sft.sft_split_update(), _mesh(1, 1), donate=True)
  new, _ = step(jax.tree.map(jnp.copy, state), batch)
  _close(new.params, reference.params, atol=PARAMS_ATOL)
  (again,) = step.place(new)
  assert all(a is b for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(new)))


def test_indivisible_batch_is_a_clear_error():
  learner, update, train, batch, _, _ = _ppo_setup()
  short = jax.tree.map(lambda x: x[:12], batch)
  with pytest.raises(ValueError, match=r"field .obs has leading size 12, not divisible by the 8 "
                                       r"devices"):
    parallel.shard_map_update(update, _mesh(8, 1))(train, short)
  with pytest.raises(ValueError, match="not divisible by the 8 devices"):
    parallel.shard_batch(short, _mesh(2, 4))
  step = parallel.make_update_step(ppo.make_split_minibatch_update(learner), _mesh(8, 1))
  with pytest.raises(ValueError, match="leading size 12, not divisible by the 8 devices"):
    step(train, short)
  with pytest.raises(TypeError, match="1 state argument"):
    step(train, train, batch)


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
  assert parallel.array_spec((512, 256), 4, min_size=1) == P("fsdp")           # largest dim
  assert parallel.array_spec((6, 512), 4, min_size=1) == P(None, "fsdp")
  assert parallel.array_spec((6, 10), 4, min_size=1) == P()                    # none divisible
  assert parallel.array_spec((256,), 4, min_size=1024) == P()                  # small: replicated
  assert parallel.array_spec((), 4, min_size=1) == P()
