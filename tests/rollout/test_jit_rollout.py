"""A whole tool-use episode in one compiled program writes the host rollout's tokens."""

import jax
import numpy as np

from rlagents import episodes
from rlagents import envs
from rlagents import hf
from rlagents import networks
from rlagents import rollout
from rlagents import tasks
from rlagents import tools

TOKENIZER = hf.build_char_tokenizer()


def test_jit_rollout_equals_the_host_rollout_for_the_same_key():
  config = networks.TransformerConfig(vocab_size=len(TOKENIZER), d_model=32, n_layers=1,
                                      n_heads=2, n_kv_heads=1, d_ff=64, max_len=96)
  model = networks.Transformer(config)
  task_list = [tasks.CalculatorTask(task_id=f"t{i}", expression=f"{i}+{i}", answer=2 * i,
                                    split="train", num_operands=2, max_digits=1)
               for i in range(8)]
  rollout_config = rollout.RolloutConfig(batch_size=8, max_length=96, max_tool_calls=2,
                                         max_segment_tokens=16)
  params = model.init(jax.random.PRNGKey(0), np.zeros((1, 96), np.int32), np.arange(96)[None])
  env = envs.CalculatorTextEnv.from_tasks(task_list, TOKENIZER, max_length=96,
                                          max_tool_calls=2, max_segment_tokens=16)
  key = jax.random.PRNGKey(3)
  host = rollout.sample_episodes(
      params, task_list, sampler=rollout.make_sampler(model, TOKENIZER, rollout_config),
      tokenizer=TOKENIZER, toolbox=tools.ToolBox([tools.CalculatorTool()]),
      config=rollout_config, key=key, rng=np.random.default_rng(0))
  _, chunk_key = jax.random.split(key)  # sample_episodes' key for its first chunk
  ours = jax.device_get(jax.jit(rollout.make_jit_rollout(model, env, rollout_config))(
      params, np.arange(8), chunk_key))
  np.testing.assert_array_equal(ours.tokens, host.tokens)
  np.testing.assert_array_equal(ours.loss_mask, host.loss_mask)
  np.testing.assert_allclose(ours.logprobs, host.logprobs, atol=1e-5)
  assert host.loss_mask.sum() > 0


def _scripted_episode(env, task_index, segments):
  """Runs `segments` (texts the policy would write) through the in-jit environment."""
  episode = env.reset(task_index)
  for text in segments:
    if not episode.active:
      break
    ids = np.asarray(TOKENIZER.encode(text, add_special_tokens=False), np.int32)
    start = int(episode.length)
    tokens = np.asarray(episode.tokens).copy()
    tokens[start:start + len(ids)] = ids
    generated = np.zeros(env.max_length, bool)
    generated[start:start + len(ids)] = True
    stop = int(ids[-1]) if int(ids[-1]) in env.stop_tokens else -1
    segment = envs.Segment(tokens=tokens, length=np.int32(start + len(ids)),
                           logprobs=np.zeros(env.max_length, np.float32),
                           generated_mask=generated, stop_token=np.int32(stop))
    episode = env.step(episode, segment, jax.random.PRNGKey(0))
  return episode


# Each script: what the policy writes, turn by turn, for the task 12+7 = 19.
SCRIPTS = {
    "a useful call, then the answer": ["<call>calc(12+7)</call>", "<answer>19</answer>"],
    "no call, right answer": ["<answer>19</answer>"],
    "wrong answer": ["<call>calc(12+7)</call>", "<answer>18</answer>"],
    "a repeated call": ["<call>calc(12+7)</call>", "<call> calc(12+7)</call>",
                        "<answer>19</answer>"],
    "malformed and unknown-tool calls": ["<call>calc(12+</call>", "<call>add(1,2)</call>",
                                         "<answer>19</answer>"],
    "no stop marker": ["19"],
    "more calls than allowed": ["<call>calc(1+1)</call>"] * 4,
}


def test_in_jit_reward_terms_equal_the_host_reward_terms():
  from rlagents import rewards  # pylint: disable=g-import-not-at-top
  task = tasks.CalculatorTask(task_id="t", expression="12+7", answer=19, split="train",
                              num_operands=2, max_digits=2)
  env = envs.CalculatorTextEnv.from_tasks([task], TOKENIZER, max_length=160, max_tool_calls=3,
                                          max_segment_tokens=32)
  toolbox = tools.ToolBox([tools.CalculatorTool()])
  for name, segments in SCRIPTS.items():
    host = episodes.Episode(task)
    for text in segments:
      if episodes.advance(host, text, toolbox=toolbox, rng=np.random.default_rng(0),
                         max_tool_calls=3) is None:
        break
    episodes.end_unanswered(host)
    expected = rewards.reward_terms(host, tasks.is_correct)
    ours = jax.device_get(env.reward_terms(_scripted_episode(env, 0, segments)))
    assert set(ours) == set(rewards.TERMS), name
    assert {k: float(v) for k, v in ours.items()} == expected, name
