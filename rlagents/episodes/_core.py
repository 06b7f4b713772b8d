"""One tool-use episode as a host-side state machine, shared by model and scripted policies.

Not jittable: it parses text and runs tools. The policy (a model or a scripted expert) writes a
segment of text that ends with a stop marker; `advance` interprets it, runs the tool on a call and
returns the observation to append, or ends the episode on an answer.
"""

import dataclasses
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from rlagents import tools as tools_lib
from rlagents.episodes import _syntax
from rlagents.episodes._syntax import ANSWER_CLOSE
from rlagents.episodes._syntax import ANSWER_OPEN
from rlagents.episodes._syntax import CALL_CLOSE
from rlagents.episodes._syntax import CALL_OPEN

OBS_OPEN, OBS_CLOSE = "<obs>", "</obs>"
BOS, EOS = "<bos>", "<eos>"
MARKERS = (BOS, EOS, CALL_OPEN, CALL_CLOSE, OBS_OPEN, OBS_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
# Where a policy's segment ends: a call, an answer, or the end of the sequence.
STOP_MARKERS = (CALL_CLOSE, ANSWER_CLOSE, EOS)


class Task(Protocol):
  """What an episode needs of a task: an id and the prompt text."""
  task_id: str

  @property
  def prompt(self) -> str:
    ...


@dataclasses.dataclass
class Action:
  """One segment the policy wrote, and what came of it.

  Attributes:
    text: the segment as generated, stop marker included.
    kind: "call", "answer" or "truncated" (no stop marker, or a limit was hit).
    result: the tool result for a call, else None.
  """
  text: str
  kind: str
  result: tools_lib.ToolResult | None = None


@dataclasses.dataclass
class Episode:
  """A whole episode: the task, every action, the final answer, and later its reward terms.

  `syntax` names how its actions are written (`episodes.SYNTAXES`): 'marker', or the tool-call
  syntax of a chat template ('hermes', 'llama3_json'); `advance` and replay read them by it.
  """
  task: Any
  actions: list[Action] = dataclasses.field(default_factory=list)
  answer: str | None = None
  done: bool = False
  reward: float = 0.0
  reward_terms: dict[str, float] = dataclasses.field(default_factory=dict)
  syntax: str = "marker"

  @property
  def truncated(self) -> bool:
    return self.done and self.answer is None

  @property
  def calls(self) -> list[tools_lib.ToolResult]:
    return [a.result for a in self.actions if a.kind == "call"]

  def to_record(self) -> dict[str, Any]:
    """A JSON-serialisable record for the audit log.

    `task` holds every field of a dataclass task, so the episode can be replayed; each action
    has the `state` (all text before it), what the policy wrote, the call, its result and the
    guardrail decision. An episode in a chat syntax also names it (`syntax`); its `state` is
    the plain text of the turns (the tokens are the chat template's).
    """
    actions = []
    marker = self.syntax == "marker"
    state = prompt_text(self.task) if marker else self.task.prompt
    for a in self.actions:
      actions.append({
          "state": state,
          "text": a.text,
          "kind": a.kind,
          "tool": (a.result.call.name if a.result and a.result.call else None),
          "arguments": (a.result.call.arguments if a.result and a.result.call else None),
          "status": (a.result.status.value if a.result else None),
          "observation": (a.result.observation if a.result else None),
          "guardrail": (a.result.guardrail if a.result else None),
      })
      if a.result is None:
        state += a.text
      else:
        state += a.text + (observation_text(a.result.observation) if marker
                           else f"\n[tool] {a.result.observation}\n")
    record = {
        "task_id": self.task.task_id,
        "task": (dataclasses.asdict(self.task) if dataclasses.is_dataclass(self.task)
                 else None),
        "prompt": self.task.prompt,
        "actions": actions,
        "answer": self.answer,
        "truncated": self.truncated,
        "reward": self.reward,
        "reward_terms": self.reward_terms,
    }
    if not marker:
      record["syntax"] = self.syntax
    return record


def prompt_text(task: Task) -> str:
  return BOS + task.prompt


def observation_text(observation: str) -> str:
  return OBS_OPEN + observation + OBS_CLOSE


def advance(episode: Episode, segment: str, *, toolbox: tools_lib.ToolBox,
            rng: np.random.Generator, max_tool_calls: int) -> str | None:
  """Interprets one generated segment; returns the observation to append, or None once done.

  The segment is read in the episode's syntax (`Episode.syntax`). In the marker syntax a
  segment ending in `</answer>` ends the episode with the text after its last `<answer>` (the
  whole segment if the marker is missing, which the verifier then rejects), and a segment
  ending in `</call>` runs the tool on the text after its last `<call>`; in a chat syntax the
  segment is one finished assistant turn, a call if it holds one in that syntax, else the
  answer. Every tool failure is an observation. Anything else (no stop marker, EOS, too many
  calls) ends the episode unanswered. The returned text is the marker format's observation
  (`<obs>...</obs>`) in the marker syntax, the tool's output itself in a chat syntax.
  """
  if episode.done:
    raise ValueError("advance() called on a finished episode")
  reading = _syntax.call_syntax(episode.syntax).interpret(segment, toolbox)
  if reading.kind == "answer":
    episode.answer = reading.body
    episode.actions.append(Action(segment, "answer"))
    episode.done = True
    return None
  if reading.kind == "call" and len(episode.calls) < max_tool_calls:
    result = toolbox.execute(reading.body, rng)
    episode.actions.append(Action(segment, "call", result))
    if episode.syntax == "marker":
      return observation_text(result.observation)
    return result.observation
  episode.actions.append(Action(segment, "truncated"))
  episode.done = True
  return None


def end_unanswered(episode: Episode, segment: str = "") -> None:
  """Ends an episode that ran out of room or turns without an answer."""
  if not episode.done:
    episode.actions.append(Action(segment, "truncated"))
    episode.done = True


def play(next_segment: Callable[[Episode, np.random.Generator], str], tasks: Sequence[Any], *,
         toolbox_for: Callable[[Any], tools_lib.ToolBox], rng: np.random.Generator,
         max_tool_calls: int, syntax: str = "marker") -> list[Episode]:
  """Plays one episode per task with a host policy (an expert or a scripted policy).

  Args:
    next_segment: `next_segment(episode, rng) -> str`, the policy's next segment.
    tasks: the tasks, one episode each.
    toolbox_for: `toolbox_for(task)`, the tools of that task's episode.
    rng: host generator for the policy's and the tools' randomness.
    max_tool_calls: calls allowed per episode (see `advance`).
    syntax: the syntax the policy writes its segments in (`Episode.syntax`).
  """
  played = []
  for task in tasks:
    episode = Episode(task, syntax=syntax)
    toolbox = toolbox_for(task)
    while not episode.done:
      advance(episode, next_segment(episode, rng), toolbox=toolbox, rng=rng,
              max_tool_calls=max_tool_calls)
    played.append(episode)
  return played
