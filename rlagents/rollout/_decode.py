"""Host `Episode` records of episodes that ran inside jit, checked against the host's tools.

A jitted rollout (`make_jit_rollout`) returns token arrays (`envs.TextEpisode`). To audit,
guard and score them like host episodes, each one is replayed on the host: its segments (the
runs of `loss_mask == 1`) go through `episodes.advance` with the suite's guarded tools, in order,
and the observation the host's tool returns is compared with the one the in-jit tool appended.
A transient failure ("busy") is the in-jit tool's own randomness, so it is taken as it happened.
The result is an ordinary `Episode` (allow-list and review-gate decisions included) that the
audit log, the reward and the drift monitor treat like any other; a call whose observations
differ, or that the guardrails refuse, is counted. Host code.
"""

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import tools as tools_lib

_BUSY = tools_lib.CALL_STATUSES.index(tools_lib.CallStatus.TRANSIENT_ERROR)


@dataclasses.dataclass
class DecodedEpisodes:
  """Host records of a batch of jitted episodes.

  Attributes:
    episodes: one `Episode` per row, in order.
    mismatched_calls: calls whose host observation differs from the in-jit one (the in-jit
      tool disagrees with the host tool, or the guardrails refused a call the jit ran).
  """
  episodes: list[episodes_lib.Episode]
  mismatched_calls: int


class _AsItHappened:
  """A toolbox that returns the in-jit transient failures as they happened."""

  def __init__(self, toolbox: tools_lib.ToolBox, statuses: Sequence[int],
               observations: Sequence[str | None]):
    self.toolbox, self.statuses, self.observations = toolbox, statuses, observations
    self.index = 0

  @property
  def specs(self) -> tuple[tools_lib.ToolSpec, ...]:
    return self.toolbox.specs

  def execute(self, call_text: str, rng: np.random.Generator) -> tools_lib.ToolResult:
    index, self.index = self.index, self.index + 1
    result = self.toolbox.execute(call_text, rng)
    busy = index < len(self.statuses) and self.statuses[index] == _BUSY
    if busy and result.status in (tools_lib.CallStatus.OK, tools_lib.CallStatus.TRANSIENT_ERROR):
      observation = self.observations[index]
      if observation is not None:
        return tools_lib.ToolResult(result.call, tools_lib.CallStatus.TRANSIENT_ERROR,
                                    observation, result.guardrail)
    elif result.status == tools_lib.CallStatus.TRANSIENT_ERROR:
      # The host tool drew a failure the jitted episode did not have: draw again.
      for _ in range(100):
        result = self.toolbox.execute(call_text, rng)
        if result.status != tools_lib.CallStatus.TRANSIENT_ERROR:
          break
    return result


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
  """`[start, end)` of each run of ones in a 0/1 vector."""
  edges = np.diff(np.concatenate([[0], (mask > 0).astype(np.int8), [0]]))
  return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


def _observation_body(text: str) -> str | None:
  if text.startswith(episodes_lib.OBS_OPEN) and text.endswith(episodes_lib.OBS_CLOSE):
    return text[len(episodes_lib.OBS_OPEN):-len(episodes_lib.OBS_CLOSE)]
  return None


def decode_jit_episodes(tokens: np.ndarray, lengths: np.ndarray, loss_mask: np.ndarray,
                        call_status: np.ndarray, tasks: Sequence[Any], *, tokenizer,
                        toolbox_for: Callable[[Any], tools_lib.ToolBox],
                        max_tool_calls: int) -> DecodedEpisodes:
  """Replays jitted episodes on the host; see the module docstring.

  Args:
    tokens: `[B, L]` int32, each episode's buffer (`envs.TextEpisode.tokens`).
    lengths: `[B]` int32, the used length of each buffer.
    loss_mask: `[B, L]`, 1 on the tokens the policy wrote.
    call_status: `[B, K]` int32, the in-jit tool's status code of each call (an index into
      `tools.CALL_STATUSES`), -1 for none.
    tasks: the `B` tasks, in row order.
    tokenizer: decodes the token ids.
    toolbox_for: `toolbox_for(task)`, the suite's guarded tools.
    max_tool_calls: the rollout's limit (as `episodes.advance` takes it).
  """
  tokens, lengths = np.asarray(tokens), np.asarray(lengths)
  loss_mask, call_status = np.asarray(loss_mask), np.asarray(call_status)
  decoded, mismatched = [], 0
  rng = np.random.default_rng(0)
  for row, task in enumerate(tasks):
    length = int(lengths[row])
    ids, runs = tokens[row, :length], _runs(loss_mask[row, :length])
    observations = []
    for index, (_, end) in enumerate(runs):
      gap_end = runs[index + 1][0] if index + 1 < len(runs) else length
      observations.append(_observation_body(tokenizer.decode(ids[end:gap_end]))
                          if gap_end > end else None)
    toolbox = _AsItHappened(toolbox_for(task), call_status[row], observations)
    episode = episodes_lib.Episode(task)
    for (start, end), logged in zip(runs, observations):
      if episode.done:
        break
      observation = episodes_lib.advance(episode, tokenizer.decode(ids[start:end]),
                                         toolbox=toolbox, rng=rng,
                                         max_tool_calls=max_tool_calls)
      if observation is None:
        continue
      if logged is None:
        # The in-jit episode ended here: the observation did not fit its buffer.
        episodes_lib.end_unanswered(episode)
      elif _observation_body(observation) != logged:
        mismatched += 1
    episodes_lib.end_unanswered(episode)
    decoded.append(episode)
  return DecodedEpisodes(decoded, mismatched)
