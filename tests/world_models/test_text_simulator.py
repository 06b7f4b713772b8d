"""The learned key-door simulator: transitions from the audit log, training, its accuracy."""

import numpy as np
import pytest

from rlagents import guardrails
from rlagents import hf
from rlagents import networks
from rlagents import world_models
from rlagents.tasks import keydoor

TOKENIZER = hf.build_char_tokenizer()
SMALL = keydoor.KeyDoorSuiteConfig(width=6, height=4, ood_width=7, ood_height=5, min_calls=4,
                                   max_calls=9, num_train=300, num_heldout=40,
                                   num_heldout_ood=8, num_calibration=8)


def _logged_transitions(tmp_path, config, split, count, seed=0):
  worlds = keydoor.generate_suite(config)[split][:count]
  played = keydoor.run_expert_episodes(worlds, toolbox_for=keydoor.toolbox_for,
                                       rng=np.random.default_rng(seed), max_tool_calls=30,
                                       config=config)
  path = str(tmp_path / f"{split}.jsonl")
  log = guardrails.AuditLog(path, resume_step=None)
  log.write(played, phase="grpo", step=0, policy="expert", suite="keydoor")
  log.write(played[:2], phase="grpo", step=0, policy="expert", suite="keydoor", imagined=True)
  return played, world_models.transitions_from_audit(path)


def test_transitions_from_the_audit_log_are_the_worlds_own(tmp_path):
  played, transitions = _logged_transitions(tmp_path, SMALL, "train", 20)
  valid = [c for e in played for c in e.calls if c.status.value == "ok"]
  assert len(transitions) == len(valid)  # imagined records are skipped, invalid calls too
  index = 0
  for episode in played:
    state = keydoor.WorldState.start(episode.task)
    for call in episode.calls:
      if call.status.value != "ok":
        continue
      t = transitions[index]
      index += 1
      assert t.observation.split(" ")[-1] != "" and t.prompt == episode.task.prompt
      before = state
      state, event = keydoor.apply_action(episode.task, state, t.action)
      assert t.next_observation == event + keydoor.state_text(episode.task, state)
      assert t.at_goal == keydoor.at_goal(episode.task, state)
      expected = (4 if event else 1 if state.has_key and not before.has_key
                  else 2 if state.door_open and not before.door_open else 0)
      assert t.effect == expected
  events = world_models.encode_text_transitions(transitions, TOKENIZER)["event"]
  np.testing.assert_array_equal(events, [t.effect != 0 or t.at_goal for t in transitions])
  assert 0 < events.mean() < 1


def test_transitions_that_do_not_fit_are_refused():
  t = world_models.TextTransition("x" * 200, "0,0", "pick()", "0,0 key", 1, False)
  with pytest.raises(ValueError, match="tokens >"):
    world_models.encode_text_transitions([t], TOKENIZER)
  t = world_models.TextTransition("6x4 door 2,1 key 0,0 goal 4,3 at 0,0", "0,0", "pick()",
                                  "0,0 key", 1, False)
  model = networks.Transformer(world_models.text_world_model_config(len(TOKENIZER)))
  with pytest.raises(ValueError, match="event_weight > 0, got 0"):
    world_models.fit_text_world_model(
        model, world_models.encode_text_transitions([t], TOKENIZER), steps=2, event_weight=0)
  with pytest.raises(ValueError, match="imagination.event_weight must be > 0"):
    world_models.ImaginationConfig(event_weight=-1.0)


@pytest.mark.slow
def test_the_simulator_predicts_held_out_real_transitions(tmp_path):
  """Acceptance: exact next observation on >= 0.95 of held-out worlds' transitions, effect
  (reward) and goal (done) on >= 0.99."""
  _, train = _logged_transitions(tmp_path, SMALL, "train", 300)
  _, heldout = _logged_transitions(tmp_path, SMALL, "heldout", 40, seed=1)
  model = networks.Transformer(world_models.text_world_model_config(len(TOKENIZER)))
  params, losses = world_models.fit_text_world_model(
      model, world_models.encode_text_transitions(train, TOKENIZER), steps=1500)
  assert losses[-1] < losses[0] / 10
  scores = world_models.text_world_model_accuracy(model, params, heldout, TOKENIZER)
  assert scores["observation"] >= 0.95, scores
  assert scores["effect"] >= 0.99 and scores["at_goal"] >= 0.99, scores
