"""The calculator task as a JAX-native text environment: the tool runs inside `jit`.

The episode format, tokenizer and limits are the host rollout's (`rlagents.rollout`,
`rlagents.tools`): a `[max_length]` token buffer starting `<bos>{question}`; the policy writes a
segment that ends in `</call>`, `</answer>` or neither; `step` reads it, runs the calculator
(`tools.JaxCalculator`, pure JAX) on a call and appends `<obs>{observation}</obs>`, or ends the
episode. Everything is a pure function of arrays, so a whole multi-turn episode (generate,
detect the call, run the tool, append, continue, answer) compiles into one program
(`rollout.make_jit_rollout`), and batches are `vmap`s.

    env = envs.CalculatorTextEnv.from_tasks(tasks, tokenizer, max_length=192, max_tool_calls=4)
    episode = env.reset(task_index)                        # one episode; vmap for a batch
    episode = env.step(episode, segment, key)              # after the policy wrote a segment
    terms = env.reward_terms(episode)                      # as rewards.reward_terms

Rewards follow `rlagents.rewards` term for term (the answer verified as
`tasks.calculator.parse_answer` reads it; a useful call is an OK call whose value is the
answer; a redundant call repeats the arguments of an earlier OK call; an invalid call is one
the tool could not run for a reason other than being busy; recovery is a busy call and a
correct answer). The tool's values are int32: see `tools.JaxCalculator`.
"""

import dataclasses
from typing import Any, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import tools as tools_lib
from rlagents.envs import _text_env

# The calculator's status codes are indexes into `tools.CALL_STATUSES`.
_CALL_OK = tools_lib.CALL_STATUSES.index(tools_lib.CallStatus.OK)
_CALL_BUSY = tools_lib.CALL_STATUSES.index(tools_lib.CallStatus.TRANSIENT_ERROR)

_MAX_ANSWER_DIGITS = 32  # parse_answer reads at most 32 digits


@flax.struct.dataclass
class TextEpisode:
  """One episode's state (a leading batch axis under `vmap`).

  Attributes:
    tokens: `[L]` int32 buffer; the episode is `tokens[:length]`, then padding 0.
    length: int32 scalar.
    loss_mask: `[L]` float32, 1 on the tokens the policy wrote.
    logprobs: `[L]` float32, the sampler's log-probabilities on those tokens, 0 elsewhere.
    task: int32 scalar, the index of the task in the environment's tables.
    active: bool scalar, the policy writes the next segment.
    answered: bool scalar, the episode ended with `</answer>`.
    correct: bool scalar, the answer verifies.
    num_calls: int32 scalar, tool calls run.
    call_status: `[K]` int32, `tools.JaxCalculator` status of each call, -1 for none.
    call_text: `[K, W]` int32, each call's text after `strip()` (to find repeated calls).
    call_text_length: `[K]` int32.
    useful_call: bool scalar, an OK call returned the answer.
  """
  tokens: jax.Array
  length: jax.Array
  loss_mask: jax.Array
  logprobs: jax.Array
  task: jax.Array
  active: jax.Array
  answered: jax.Array
  correct: jax.Array
  num_calls: jax.Array
  call_status: jax.Array
  call_text: jax.Array
  call_text_length: jax.Array
  useful_call: jax.Array


@flax.struct.dataclass
class Segment:
  """What the policy wrote in one turn (`sampling.SegmentOutput` rows, one episode).

  Attributes:
    tokens: `[L]` int32, the buffer with the segment appended.
    length: int32 scalar, the length after the segment.
    logprobs: `[L]` float32, log-probabilities at the generated positions.
    generated_mask: `[L]` bool, True on the segment's tokens.
    stop_token: int32 scalar, the stop token that ended it, or -1.
  """
  tokens: jax.Array
  length: jax.Array
  logprobs: jax.Array
  generated_mask: jax.Array
  stop_token: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class CalculatorTextEnv:
  """Calculator tasks, the in-jit calculator and the episode rules; see the module docstring.

  Build with `from_tasks` (host code); the methods are pure JAX. The task tables are numpy
  arrays, constants of the compiled program.

  Attributes:
    calculator: the tool.
    prompts: `[N, L]` int32, `<bos>{question}` of each task, padded with 0.
    prompt_lengths: `[N]` int32.
    answer_digits: `[N, 32]` int32, the token ids of each answer's digits (no sign, no leading
      zeros; none for 0), left-aligned; `answer_digit_counts` `[N]`; `answer_negative` `[N]`.
    answer_value: `[N]` int32, the answer, where `answer_fits` `[N]` (it is an int32).
    special: token ids of the markers, by name.
    max_length: L.
    max_tool_calls: K, calls an episode may make (one more ends it unanswered).
    max_segment_tokens: W, the longest segment, so the longest call text.
  """
  calculator: tools_lib.JaxCalculator
  prompts: np.ndarray
  prompt_lengths: np.ndarray
  answer_digits: np.ndarray
  answer_digit_counts: np.ndarray
  answer_negative: np.ndarray
  answer_value: np.ndarray
  answer_fits: np.ndarray
  special: dict[str, int]
  max_length: int
  max_tool_calls: int
  max_segment_tokens: int

  @classmethod
  def from_tasks(cls, tasks: Sequence[Any], tokenizer: Any, *, max_length: int = 192,
                 max_tool_calls: int = 4, max_segment_tokens: int = 32,
                 failure_rate: float = 0.0) -> "CalculatorTextEnv":
    """Tokenizes the tasks (objects with `prompt` and an int `answer`); host code.

    Raises:
      ValueError: a prompt does not fit in `max_length`, or a limit is below 1.
    """
    for name, value in (("max_length", max_length), ("max_tool_calls", max_tool_calls),
                        ("max_segment_tokens", max_segment_tokens)):
      if value < 1:
        raise ValueError(f"CalculatorTextEnv: {name} must be >= 1, got {value}")
    if not tasks:
      raise ValueError("CalculatorTextEnv needs at least one task")
    calculator = tools_lib.JaxCalculator.from_tokenizer(
        tokenizer, failure_rate=failure_rate, max_call_tokens=max_segment_tokens)
    special = {name: tokenizer.convert_tokens_to_ids(name) for name in episodes_lib.MARKERS}
    digit_ids = calculator.digit_tokens
    n = len(tasks)
    prompts = np.zeros((n, max_length), np.int32)
    prompt_lengths = np.zeros(n, np.int32)
    answer_digits = np.zeros((n, _MAX_ANSWER_DIGITS), np.int32)
    answer_digit_counts = np.zeros(n, np.int32)
    for i, task in enumerate(tasks):
      ids = tokenizer.encode("<bos>" + task.prompt, add_special_tokens=False)
      if len(ids) >= max_length:
        raise ValueError(f"task {i}'s prompt needs {len(ids)} tokens; max_length={max_length}")
      prompts[i, :len(ids)] = ids
      prompt_lengths[i] = len(ids)
      magnitude = str(abs(int(task.answer))).lstrip("0")
      answer_digits[i, :len(magnitude)] = digit_ids[[int(d) for d in magnitude]]
      answer_digit_counts[i] = len(magnitude)
    answers = np.array([int(t.answer) for t in tasks], np.int64)
    fits = (answers >= -2**31) & (answers < 2**31)
    return cls(calculator=calculator, prompts=prompts, prompt_lengths=prompt_lengths,
               answer_digits=answer_digits, answer_digit_counts=answer_digit_counts,
               answer_negative=answers < 0, answer_value=np.where(fits, answers, 0).astype(
                   np.int32), answer_fits=fits, special=special, max_length=max_length,
               max_tool_calls=max_tool_calls, max_segment_tokens=max_segment_tokens)

  @property
  def num_tasks(self) -> int:
    return len(self.prompts)

  @property
  def stop_tokens(self) -> tuple[int, ...]:
    """The tokens that end a segment: the host sampler's (`</call>`, `</answer>`, EOS)."""
    return tuple(self.special[name] for name in episodes_lib.STOP_MARKERS)

  def reset(self, task: jax.Array) -> TextEpisode:
    """A new episode of task `task` (int32 scalar): the prompt, nothing written yet."""
    k, w = self.max_tool_calls, self.max_segment_tokens
    task = jnp.asarray(task, jnp.int32)
    return TextEpisode(
        tokens=jnp.asarray(self.prompts)[task], length=jnp.asarray(self.prompt_lengths)[task],
        loss_mask=jnp.zeros(self.max_length, jnp.float32),
        logprobs=jnp.zeros(self.max_length, jnp.float32), task=task, active=jnp.bool_(True),
        answered=jnp.bool_(False), correct=jnp.bool_(False), num_calls=jnp.int32(0),
        call_status=jnp.full(k, -1, jnp.int32), call_text=jnp.zeros((k, w), jnp.int32),
        call_text_length=jnp.zeros(k, jnp.int32), useful_call=jnp.bool_(False))

  def _window(self, tokens, start, end):
    """`tokens[start:end]` as a `[W]` window padded with 0, and its length."""
    return _text_env.text_window(tokens, start, end, self.max_segment_tokens, self.max_length)

  def _after_last(self, tokens, marker, start, end):
    """The text of `tokens[start:end]` after its last `marker` token (all of it if none)."""
    return _text_env.text_after_last(tokens, marker, start, end, self.max_segment_tokens,
                                self.max_length)

  def _verifies(self, window, length, task):
    """`tasks.calculator.is_correct`: `-?[0-9]{1,32}` after strip(), equal to the answer."""
    cls = jnp.asarray(self.calculator.char_class)[window]
    index = jnp.arange(window.shape[0])
    inside = index < length
    not_space = inside & (cls != tools_lib.CharClass.SPACE)
    first = jnp.argmax(not_space)
    last = window.shape[0] - 1 - jnp.argmax(not_space[::-1])
    negative = cls[first] == tools_lib.CharClass.MINUS
    digits_from = first + negative.astype(jnp.int32)
    body = (index >= digits_from) & (index <= last)
    is_digit = cls == tools_lib.CharClass.DIGIT
    count = last - digits_from + 1
    well_formed = (jnp.any(not_space) & (count >= 1) & (count <= _MAX_ANSWER_DIGITS)
                   & jnp.all(jnp.where(body, is_digit, True)))
    zero_id = self.calculator.digit_tokens[0]
    significant = body & (window != zero_id)
    lead = jnp.where(jnp.any(significant), jnp.argmax(significant), last + 1)
    magnitude_count = last + 1 - lead  # digits after the leading zeros
    target = jnp.asarray(self.answer_digits)[task]
    target_count = jnp.asarray(self.answer_digit_counts)[task]
    shifted = window[jnp.clip(lead + jnp.arange(_MAX_ANSWER_DIGITS), 0, window.shape[0] - 1)]
    same_digits = jnp.all(jnp.where(jnp.arange(_MAX_ANSWER_DIGITS) < target_count,
                                    shifted == target, True))
    same_sign = (magnitude_count == 0) | (negative == jnp.asarray(self.answer_negative)[task])
    return well_formed & (magnitude_count == target_count) & same_digits & same_sign

  def step(self, episode: TextEpisode, segment: Segment, key: jax.Array) -> TextEpisode:
    """Reads the segment the policy wrote, runs the tool or ends the episode.

    As the host's `episodes.advance`: `</answer>` ends the episode with the text after
    the segment's last `<answer>`; `</call>` with fewer than `max_tool_calls` calls so far runs
    the calculator on the text after the segment's last `<call>` and appends
    `<obs>{observation}</obs>`, unless that would fill the buffer, which ends the episode
    unanswered; anything else ends it unanswered. An inactive episode is returned unchanged.
    """
    active = episode.active
    start, end = episode.length, segment.length
    generated = segment.generated_mask & active
    loss_mask = jnp.where(generated, 1.0, episode.loss_mask)
    logprobs = jnp.where(generated, segment.logprobs, episode.logprobs)
    tokens = jnp.where(active, segment.tokens, episode.tokens)

    answers = active & (segment.stop_token == self.special["</answer>"])
    answer, answer_length = self._after_last(tokens, self.special["<answer>"], start, end - 1)
    correct = answers & self._verifies(answer, answer_length, episode.task)

    calls = (active & (segment.stop_token == self.special["</call>"])
             & (episode.num_calls < self.max_tool_calls))
    call, call_length = self._after_last(tokens, self.special["<call>"], start, end - 1)
    result = self.calculator.execute(call, call_length, key)
    observation = jnp.concatenate([
        jnp.array([self.special["<obs>"]], jnp.int32), result.observation,
        jnp.zeros(1, jnp.int32)])
    obs_length = result.observation_length + 2
    observation = observation.at[result.observation_length + 1].set(self.special["</obs>"])
    fits = end + obs_length < self.max_length
    slots = jnp.arange(observation.shape[0])
    write_at = jnp.where(calls & fits & (slots < obs_length), end + slots, self.max_length)
    tokens = tokens.at[write_at].set(observation, mode="drop")

    # The call's record: its stripped text (repeats are found on it) and status.
    cls = jnp.asarray(self.calculator.char_class)[call]
    not_space = (jnp.arange(call.shape[0]) < call_length) & (cls != tools_lib.CharClass.SPACE)
    first = jnp.argmax(not_space)
    stripped_length = jnp.where(
        jnp.any(not_space), call.shape[0] - jnp.argmax(not_space[::-1]) - first, 0)
    stripped, _ = self._window(call, first, first + stripped_length)
    slot = jnp.where(calls, episode.num_calls, self.max_tool_calls)
    ok = result.status == _CALL_OK
    useful = (calls & ok & jnp.asarray(self.answer_fits)[episode.task]
              & (result.value == jnp.asarray(self.answer_value)[episode.task]))
    return episode.replace(
        tokens=tokens,
        length=jnp.where(active, end + jnp.where(calls & fits, obs_length, 0), episode.length),
        loss_mask=loss_mask,
        logprobs=logprobs,
        active=calls & fits,
        answered=episode.answered | answers,
        correct=episode.correct | correct,
        num_calls=episode.num_calls + calls.astype(jnp.int32),
        call_status=episode.call_status.at[slot].set(result.status, mode="drop"),
        call_text=episode.call_text.at[slot].set(stripped, mode="drop"),
        call_text_length=episode.call_text_length.at[slot].set(stripped_length, mode="drop"),
        useful_call=episode.useful_call | useful,
    )

  def reward_terms(self, episode: TextEpisode) -> dict[str, jax.Array]:
    """The raw values of `rewards.TERMS` for one finished episode (float32 scalars)."""
    made = episode.call_status >= 0
    ok = episode.call_status == _CALL_OK
    index = jnp.arange(self.max_tool_calls)
    w = jnp.arange(self.max_segment_tokens)
    same_text = ((episode.call_text_length[:, None] == episode.call_text_length[None, :])
                 & jnp.all((episode.call_text[:, None] == episode.call_text[None, :])
                           | (w >= episode.call_text_length[:, None, None]), axis=-1))
    earlier_ok = ok[None, :] & (index[None, :] < index[:, None])
    redundant = ok & jnp.any(same_text & earlier_ok, axis=1)
    busy = episode.call_status == _CALL_BUSY
    invalid = made & ~ok & ~busy  # malformed, unknown tool or rejected arguments
    return {
        "correct_answer": episode.correct.astype(jnp.float32),
        "correct_tool_call": episode.useful_call.astype(jnp.float32),
        "redundant_calls": redundant.sum().astype(jnp.float32),
        "invalid_calls": invalid.sum().astype(jnp.float32),
        "recovery": (jnp.any(busy) & episode.correct).astype(jnp.float32),
    }
