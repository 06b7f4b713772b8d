"""A scripted, noisy expert for the calculator suite: the source of SFT demonstrations.

Its mistakes are the ones the reward should teach away: it sometimes answers without the tool (a
guess, always wrong), sends an expression with a wrong digit (a silent error), writes a malformed
call (and then recovers only sometimes), gives up on a busy tool instead of retrying, and checks
a good result with a redundant second call. Host code, not jittable.
"""

import dataclasses

import numpy as np

from rlagents import episodes as episodes_lib
from rlagents.tools import CallStatus


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoisyExpertConfig:
  """How often the expert errs. Every rate is a probability per decision.

  Attributes:
    tool_name: the calculator's name in calls.
    skip_tool_rate: answers at once with a guess instead of calling the tool.
    typo_rate: sends the expression with one digit changed (the result is then wrong).
    malformed_rate: writes a call that does not parse or that the tool rejects.
    recover_rate: after its own malformed call, calls again correctly (else guesses).
    retry_rate: after a busy tool, calls again (else guesses).
    redundant_rate: after a good result, repeats the same call once before answering.
  """
  tool_name: str = "calc"
  skip_tool_rate: float = 0.15
  typo_rate: float = 0.05
  malformed_rate: float = 0.10
  recover_rate: float = 0.5
  retry_rate: float = 0.4
  redundant_rate: float = 0.10

  def __post_init__(self):
    check_rates(self)


def check_rates(config) -> None:
  """Raises ValueError naming the first `*_rate` field of a config dataclass outside [0, 1]."""
  for field in dataclasses.fields(config):
    value = getattr(config, field.name)
    if field.name.endswith("_rate") and not 0.0 <= value <= 1.0:
      raise ValueError(f"{type(config).__name__}.{field.name} must be in [0, 1], got {value}")


def _change_one_digit(text: str, rng: np.random.Generator) -> str:
  positions = [i for i, c in enumerate(text) if c.isdigit()]
  i = positions[rng.integers(len(positions))]
  new_digit = str((int(text[i]) + rng.integers(1, 10)) % 10)
  return text[:i] + new_digit + text[i + 1:]


def _guess(answer: int, rng: np.random.Generator) -> str:
  """A plausible wrong answer: the true one with one digit changed."""
  return _change_one_digit(str(answer), rng)


class NoisyExpert:
  """Writes the next segment of an episode, reading the observations so far."""

  def __init__(self, config: NoisyExpertConfig = NoisyExpertConfig()):
    self.config = config

  def _call(self, expression: str) -> str:
    return f"{episodes_lib.CALL_OPEN}{self.config.tool_name}({expression}){episodes_lib.CALL_CLOSE}"

  def _answer(self, text: str) -> str:
    return f"{episodes_lib.ANSWER_OPEN}{text}{episodes_lib.ANSWER_CLOSE}"

  def _malformed_call(self, expression: str, rng: np.random.Generator) -> str:
    name = self.config.tool_name
    slips = (
        f"{name}({expression}",              # missing parenthesis
        f"{name}{expression})",              # missing open parenthesis
        f"{name}({expression}+)",            # dangling operator
        f"{name}({expression}*)",            # dangling operator
    )
    return f"{episodes_lib.CALL_OPEN}{slips[rng.integers(len(slips))]}{episodes_lib.CALL_CLOSE}"

  def next_segment(self, episode: episodes_lib.Episode, rng: np.random.Generator, *,
                   max_tool_calls: int) -> str:
    """The expert's next segment of text, ending in `</call>` or `</answer>`."""
    c = self.config
    task = episode.task
    calls = episode.calls
    if not calls:
      if rng.random() < c.skip_tool_rate:
        return self._answer(_guess(task.answer, rng))
      return self._first_call(task.expression, rng)
    last = calls[-1]
    if last.status == CallStatus.OK:
      repeated = len(calls) > 1 and calls[-2].call == last.call
      if not repeated and len(calls) < max_tool_calls and rng.random() < c.redundant_rate:
        return self._call(last.call.arguments)
      return self._answer(last.observation)
    if len(calls) >= max_tool_calls:
      return self._answer(_guess(task.answer, rng))
    if last.status == CallStatus.TRANSIENT_ERROR:
      if rng.random() < c.retry_rate:
        return self._call(last.call.arguments)
      return self._answer(_guess(task.answer, rng))
    if rng.random() < c.recover_rate:
      return self._call(task.expression)
    return self._answer(_guess(task.answer, rng))

  def _first_call(self, expression: str, rng: np.random.Generator) -> str:
    draw = rng.random()
    if draw < self.config.malformed_rate:
      return self._malformed_call(expression, rng)
    if draw < self.config.malformed_rate + self.config.typo_rate:
      return self._call(_change_one_digit(expression, rng))
    return self._call(expression)


def run_expert_episodes(expert: NoisyExpert, tasks, *, toolbox, rng: np.random.Generator,
                        max_tool_calls: int) -> list[episodes_lib.Episode]:
  """Plays one episode per task with the real tools (busy failures included)."""
  return episodes_lib.play(
      lambda episode, rng: expert.next_segment(episode, rng, max_tool_calls=max_tool_calls),
      tasks, toolbox_for=lambda task: toolbox, rng=rng, max_tool_calls=max_tool_calls)
