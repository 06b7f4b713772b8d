"""The key-door world runs in both rollout modes with the same tokens and masks per key.

(The calculator's check is `test_jit_rollout.py`; the learned simulator's is in
`tests/world_models/test_text_simulator.py`.)"""

import jax
import numpy as np
import pytest

from rlagents import episodes
from rlagents import hf
from rlagents import learners
from rlagents import networks
from rlagents import rollout
from rlagents import tools
from rlagents import world_models
from rlagents.tasks import keydoor

TOKENIZER = hf.build_char_tokenizer()
LENGTH = 320
SMALL_WORLDS = keydoor.KeyDoorSuiteConfig(
    width=5, height=3, ood_width=6, ood_height=4, min_calls=3, max_calls=7, num_train=48,
    num_heldout=4, num_heldout_ood=4, num_calibration=4, slip_rate=0.1)


def _model(length=LENGTH):
  config = networks.TransformerConfig(vocab_size=len(TOKENIZER), d_model=32, n_layers=1,
                                      n_heads=2, n_kv_heads=1, d_ff=64, max_len=length)
  model = networks.Transformer(config)
  params = model.init(jax.random.PRNGKey(0), np.zeros((1, length), np.int32),
                      np.arange(length)[None])
  return model, params


@pytest.fixture(scope="module")
def keydoor_policy():
  """A tiny policy after 150 SFT steps on the noisy expert: it writes calls, valid or not."""
  worlds = keydoor.generate_suite(SMALL_WORLDS)["train"]
  demos = keydoor.run_expert_episodes(worlds * 4, toolbox_for=keydoor.toolbox_for,
                                      rng=np.random.default_rng(0), max_tool_calls=16,
                                      config=SMALL_WORLDS)
  fit = [d for d in demos if np.count_nonzero(episodes.encode(d, TOKENIZER, 10_000)[0]) <= LENGTH]
  data = episodes.stack_episodes(fit, TOKENIZER, LENGTH)
  model, params = _model()
  state = learners.create_train_state(model, params, learners.OptimizerConfig(
      learning_rate=3e-3))
  step = learners.make_sft_step()
  rng = np.random.default_rng(0)
  for _ in range(150):
    rows = rng.integers(len(data.tokens), size=16)
    state, _ = step(state, {"tokens": data.tokens[rows], "loss_mask": data.loss_mask[rows]})
  return model, state.params, worlds


def _both_modes(model, params, task_list, env, toolbox_for, max_tool_calls):
  config = rollout.RolloutConfig(batch_size=len(task_list), max_length=env.max_length,
                                 max_tool_calls=max_tool_calls, max_segment_tokens=16)
  key = jax.random.PRNGKey(3)
  host = rollout.sample_episodes(
      params, task_list, sampler=rollout.make_sampler(model, TOKENIZER, config),
      tokenizer=TOKENIZER, toolbox_for=toolbox_for, config=config, key=key,
      rng=np.random.default_rng(0))
  _, chunk_key = jax.random.split(key)  # sample_episodes' key for its first chunk
  ours = jax.device_get(jax.jit(rollout.make_jit_rollout(model, env, config))(
      params, np.arange(len(task_list)), chunk_key))
  np.testing.assert_array_equal(ours.tokens, host.tokens)
  np.testing.assert_array_equal(ours.loss_mask, host.loss_mask)
  np.testing.assert_allclose(ours.logprobs, host.logprobs, atol=1e-5)
  return host, ours


def test_keydoor_world_in_both_modes(keydoor_policy):
  model, params, worlds = keydoor_policy
  task_list = worlds[:16]
  env = keydoor.jax_env(task_list, TOKENIZER, rollout.RolloutConfig(
      max_length=LENGTH, max_tool_calls=10, max_segment_tokens=16), SMALL_WORLDS)
  host, ours = _both_modes(model, params, task_list, env, keydoor.toolbox_for, 10)
  calls = [c for e in host.episodes for c in e.calls]
  assert sum(c.status == tools.CallStatus.OK for c in calls) >= 5  # the policy acts
  terms = [keydoor.reward_terms(e) for e in host.episodes]
  ours_terms = jax.device_get(jax.vmap(env.reward_terms)(ours))
  for name in keydoor.REWARD_TERMS:
    np.testing.assert_array_equal(ours_terms[name], [t[name] for t in terms])
  # Replayed on the host through the guarded tools, every in-jit observation is reproduced.
  decoded = rollout.decode_jit_episodes(
      ours.tokens, ours.length, ours.loss_mask, ours.call_status, task_list,
      tokenizer=TOKENIZER, toolbox_for=keydoor.toolbox_for, max_tool_calls=10)
  assert decoded.mismatched_calls == 0
  assert [keydoor.reward_terms(e) for e in decoded.episodes] == terms


@pytest.mark.slow
def test_learned_simulator_in_both_modes(keydoor_policy):
  """The simulator as a jitted environment and as host tools: the same tokens and masks."""
  model, params, worlds = keydoor_policy
  played = keydoor.run_expert_episodes(worlds, toolbox_for=keydoor.toolbox_for,
                                       rng=np.random.default_rng(1), max_tool_calls=16,
                                       config=SMALL_WORLDS)
  transitions = [world_models.TextTransition(
      e.task.prompt, before, f"{c.call.name}({c.call.arguments})", c.observation, 0,
      c.observation.endswith(" goal"))
      for e in played for before, c in zip(
          [world_models.text_start_observation(e.task.prompt)]
          + [c.observation for c in e.calls if c.status == tools.CallStatus.OK],
          [c for c in e.calls if c.status == tools.CallStatus.OK])]
  sim_model = networks.Transformer(world_models.text_world_model_config(len(TOKENIZER),
                                                                          d_model=32))
  sim_params, _ = world_models.fit_text_world_model(
      sim_model, world_models.encode_text_transitions(transitions, TOKENIZER), steps=60)
  task_list = worlds[:8]
  real = keydoor.jax_env(task_list, TOKENIZER, rollout.RolloutConfig(
      max_length=LENGTH, max_tool_calls=6, max_segment_tokens=16), SMALL_WORLDS)
  env = world_models.TextWorldModelEnv.wrap(real, sim_model, sim_params, TOKENIZER)
  predictor = world_models.TextHostPredictor(sim_model, sim_params, TOKENIZER)
  host, ours = _both_modes(
      model, params, task_list, env,
      lambda task: world_models.SimulatedWorld(predictor, task).toolbox(), 6)
  asked = np.array([any(c.status == tools.CallStatus.OK for c in e.calls)
                    for e in host.episodes])
  assert asked.any()
  # The model's entropy is recorded where it predicted; an episode of answers and malformed
  # calls only never asked it.
  uncertainty = np.asarray(ours.uncertainty)
  assert np.all(uncertainty[asked] > 0) and np.all(uncertainty[~asked] == 0), uncertainty
