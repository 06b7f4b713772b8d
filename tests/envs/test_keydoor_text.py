"""The key-door world on token ids follows the host world call for call, text for text."""

import jax
import numpy as np
import pytest

from rlagents import episodes
from rlagents import envs
from rlagents import hf
from rlagents.tasks import keydoor

TOKENIZER = hf.build_char_tokenizer()
CONFIG = keydoor.KeyDoorSuiteConfig(num_train=60, num_heldout=10, num_heldout_ood=10,
                                    num_calibration=10)
SPLITS = keydoor.generate_suite(CONFIG)
WORLDS = SPLITS["train"][:6] + SPLITS["heldout_ood"][:2]
SEGMENTS = ([f"<call>{a}</call>" for a in keydoor.ACTIONS]
            + ["<call>move(up)</call>", "<call> pick()</call>", "<call>open(</call>",
               "<call>move(east)move(east)</call>", "<call></call>"])


_STEPS = {}


def _jit_episode(env, task_index, texts):
  step = _STEPS.setdefault(id(env), jax.jit(env.step))
  episode = env.reset(task_index)
  for text in texts:
    if not episode.active:
      break
    ids = np.asarray(TOKENIZER.encode(text, add_special_tokens=False), np.int32)
    start = int(episode.length)
    end = min(start + len(ids), env.max_length)
    tokens = np.asarray(episode.tokens).copy()
    tokens[start:end] = ids[:end - start]
    generated = np.zeros(env.max_length, bool)
    generated[start:end] = True
    stop = int(ids[-1]) if int(ids[-1]) in env.stop_tokens else -1
    segment = envs.Segment(tokens=tokens, length=np.int32(end),
                           logprobs=np.zeros(env.max_length, np.float32),
                           generated_mask=generated, stop_token=np.int32(stop))
    episode = step(episode, segment, jax.random.PRNGKey(0))
  return episode


def _host_episode(task, texts, max_tool_calls, max_length):
  episode = episodes.Episode(task)
  toolbox = keydoor.toolbox_for(task)
  text = episodes.prompt_text(task)
  for segment in texts:
    observation = episodes.advance(episode, segment, toolbox=toolbox,
                                   rng=np.random.default_rng(0), max_tool_calls=max_tool_calls)
    text += segment
    if observation is None:
      break
    if len(TOKENIZER.encode(text + observation, add_special_tokens=False)) >= max_length:
      episodes.end_unanswered(episode)
      break
    text += observation
  episodes.end_unanswered(episode)
  return episode, text


SHORT = envs.KeyDoorTextEnv.from_tasks(WORLDS, TOKENIZER, max_length=600, max_tool_calls=12)
LONG = envs.KeyDoorTextEnv.from_tasks(WORLDS, TOKENIZER, max_length=1200, max_tool_calls=48)


@pytest.mark.parametrize("seed", range(4))
def test_random_calls_give_the_host_worlds_tokens_and_reward_terms(seed):
  rng = np.random.default_rng(seed)
  env = SHORT
  for index, task in enumerate(WORLDS):
    texts = list(rng.choice(SEGMENTS, 14)) + ["<answer>done</answer>"]
    if seed == 3:  # the shortest solution: reaches the goal
      state = keydoor.WorldState.start(task)
      texts = []
      while True:
        action = keydoor.plan(task, state)
        if action == keydoor.ANSWER:
          texts.append("<answer>done</answer>")
          break
        texts.append(f"<call>{action}</call>")
        state, _ = keydoor.apply_action(task, state, action)
      env = LONG
    host, text = _host_episode(task, texts, env.max_tool_calls, env.max_length)
    ours = jax.device_get(_jit_episode(env, index, texts))
    expected = TOKENIZER.encode(text, add_special_tokens=False)
    assert ours.tokens[:ours.length].tolist() == expected, (index, texts)
    terms = {k: float(v) for k, v in env.reward_terms(ours).items()}
    assert terms == keydoor.reward_terms(host), (index, texts)
    assert float(env.compose_reward(env.reward_terms(ours))) == pytest.approx(
        keydoor.compose_reward(keydoor.reward_terms(host), CONFIG))
    if seed == 3:
      assert terms["correct_answer"] == 1.0
      assert int(ours.num_calls) == task.shortest_calls


def test_a_full_buffer_ends_the_episode_as_on_the_host():
  env = envs.KeyDoorTextEnv.from_tasks(WORLDS, TOKENIZER, max_length=120, max_tool_calls=40)
  texts = ["<call>move(east)</call>", "<call>move(west)</call>"] * 10
  host, text = _host_episode(WORLDS[0], texts, 40, 120)
  ours = jax.device_get(_jit_episode(env, 0, texts))
  assert ours.tokens[:ours.length].tolist() == TOKENIZER.encode(text, add_special_tokens=False)
  assert not ours.active and host.truncated
  assert int(ours.num_calls) == len(host.calls)


def test_bad_worlds_and_limits_are_refused():
  big = keydoor.KeyDoorTask(task_id="x", width=11, height=4, door_x=3, door_y=0, key_x=0,
                            key_y=0, goal_x=5, goal_y=0, start_x=1, start_y=1, split="train",
                            shortest_calls=10)
  with pytest.raises(ValueError, match="two-digit coordinates"):
    envs.KeyDoorTextEnv.from_tasks([big], TOKENIZER)
  with pytest.raises(ValueError, match="max_tool_calls must be >= 1"):
    envs.KeyDoorTextEnv.from_tasks(WORLDS, TOKENIZER, max_tool_calls=0)
  with pytest.raises(ValueError, match="prompt needs"):
    envs.KeyDoorTextEnv.from_tasks(WORLDS, TOKENIZER, max_length=20)
