"""Multi-turn rollouts: the host loop, tool observations and `loss_mask`."""

import numpy as np
import jax
import jax.numpy as jnp

from rlagents import episodes
from rlagents import hf
from rlagents import networks
from rlagents import rollout
from rlagents import sampling
from rlagents import tasks
from rlagents import tools
from rlagents.tasks import calculator_expert

TOKENIZER = hf.build_char_tokenizer()
TOOLBOX = tools.ToolBox([tools.CalculatorTool(failure_rate=0.0)])
TASK = tasks.CalculatorTask(task_id="t0", expression="12*3+4", answer=40, split="train",
                            num_operands=3, max_digits=2)


class ScriptedSampler:
  """Stands in for the model: writes the next scripted segment of every active row."""

  def __init__(self, segments_per_row):
    self.segments = [list(s) for s in segments_per_row]

  def __call__(self, params, tokens, lengths, active, key):
    del params, key
    tokens, lengths = np.array(tokens), np.array(lengths)
    generated = np.zeros(tokens.shape, bool)
    logprobs = np.zeros(tokens.shape, np.float32)
    for b in np.flatnonzero(active):
      ids = TOKENIZER.encode(self.segments[b].pop(0), add_special_tokens=False)
      tokens[b, lengths[b]:lengths[b] + len(ids)] = ids
      generated[b, lengths[b]:lengths[b] + len(ids)] = True
      logprobs[b, lengths[b]:lengths[b] + len(ids)] = -0.5
      lengths[b] += len(ids)
    return sampling.SegmentOutput(tokens=tokens, lengths=lengths, logprobs=logprobs,
                                  generated_mask=generated,
                                  stop_token=np.full(len(lengths), -1, np.int32))


def _run(segments_per_row, config=rollout.RolloutConfig(batch_size=4, max_length=160)):
  return rollout.sample_episodes(
      None, [TASK] * len(segments_per_row), sampler=ScriptedSampler(segments_per_row),
      tokenizer=TOKENIZER, toolbox=TOOLBOX, config=config, key=jax.random.PRNGKey(0),
      rng=np.random.default_rng(0))


def _text(ids):
  return TOKENIZER.decode(ids)


def test_tool_errors_become_observations_and_the_episode_goes_on():
  batch = _run([["<call>calc(12*3+)</call>", "<call>nope(1)</call>", "<call>calc(12*3+4)</call>",
                 "<answer>40</answer>"]])
  episode = batch.episodes[0]
  statuses = [r.status for r in episode.calls]
  assert statuses == [tools.CallStatus.INVALID_ARGUMENTS, tools.CallStatus.UNKNOWN_TOOL,
                      tools.CallStatus.OK]
  assert episode.answer == "40" and not episode.truncated
  text = _text(batch.tokens[0][batch.tokens[0] > 0])
  assert text == ("<bos>12*3+4=?<call>calc(12*3+)</call><obs>error: dangling operator '+' at 4"
                  "</obs><call>nope(1)</call><obs>error: no tool nope</obs>"
                  "<call>calc(12*3+4)</call><obs>40</obs><answer>40</answer>")


def test_loss_mask_is_one_exactly_on_policy_tokens():
  segments = [["<call>calc(12*3+4)</call>", "<answer>40</answer>"],
              ["<answer>7</answer>"]]
  batch = _run(segments)
  for row, written in enumerate(segments):
    mask = batch.loss_mask[row].astype(bool)
    assert _text(batch.tokens[row][mask]) == "".join(written)
    unmasked = batch.tokens[row][~mask & (batch.tokens[row] > 0)]
    expected_context = "<bos>12*3+4=?" + ("<obs>40</obs>" if row == 0 else "")
    assert _text(unmasked) == expected_context
    np.testing.assert_array_equal(batch.logprobs[row] != 0, mask)


def test_limits_end_episodes_unanswered():
  config = rollout.RolloutConfig(batch_size=2, max_length=96, max_tool_calls=1)
  batch = _run([["<call>calc(1+1)</call>", "<call>calc(1+1)</call>"],
                ["no stop marker"]], config)
  assert [e.truncated for e in batch.episodes] == [True, True]
  assert len(batch.episodes[0].calls) == 1


def test_expert_demonstrations_mask_prompt_and_observations():
  rng = np.random.default_rng(0)
  toolbox = tools.ToolBox([tools.CalculatorTool(failure_rate=0.5)])
  demos = calculator_expert.run_expert_episodes(
      calculator_expert.NoisyExpert(), [TASK] * 20, toolbox=toolbox, rng=rng, max_tool_calls=3)
  batch = episodes.stack_episodes(demos, TOKENIZER, max_length=160)
  for row, episode in enumerate(demos):
    mask = batch.loss_mask[row].astype(bool)
    assert _text(batch.tokens[row][mask]) == "".join(a.text for a in episode.actions)
    context = _text(batch.tokens[row][~mask & (batch.tokens[row] > 0)])
    observations = "".join(f"<obs>{r.observation}</obs>" for r in episode.calls)
    assert context == "<bos>12*3+4=?" + observations


def test_model_rollout_masks_only_generated_tokens():
  model = networks.Transformer(networks.TransformerConfig(
      vocab_size=len(TOKENIZER), d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64,
      max_len=64))
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 64), jnp.int32),
                      jnp.arange(64)[None])
  config = rollout.RolloutConfig(batch_size=8, max_length=64, max_segment_tokens=12)
  batch = rollout.sample_episodes(
      params, [TASK] * 5, sampler=rollout.make_sampler(model, TOKENIZER, config),
      tokenizer=TOKENIZER, toolbox=TOOLBOX, config=config, key=jax.random.PRNGKey(1),
      rng=np.random.default_rng(0))
  assert batch.tokens.shape == (5, 64) and len(batch.episodes) == 5
  for row, episode in enumerate(batch.episodes):
    assert episode.done
    mask = batch.loss_mask[row].astype(bool)
    assert _text(batch.tokens[row][mask]) == "".join(a.text for a in episode.actions)
    prompt_len = len(TOKENIZER.encode("<bos>12*3+4=?", add_special_tokens=False))
    assert not mask[:prompt_len].any()
    assert (batch.logprobs[row][mask] < 0).all() and (batch.logprobs[row][~mask] == 0).all()
