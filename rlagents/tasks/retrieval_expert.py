"""A scripted, noisy expert for the retrieval QA suite: the source of SFT demonstrations.

The honest way to answer is to search for the asked fact of the place (`search(capital velora)`)
and answer with the word the passage gives. The expert's slips are the ones the grounded reward
should teach away: it sometimes answers from "memory" (an invented word, never grounded), searches
with the wrong keyword (the answer is then usually not in the results, so it guesses), answers
with the word of a passage that does not hold the fact, misspells the answer, or repeats a search
it already made. Host code, not jittable.
"""

import dataclasses
import re

import numpy as np

from rlagents import episodes as episodes_lib
from rlagents.tasks import calculator_expert
from rlagents.tasks import retrieval
from rlagents.tools import CallStatus

# question pattern -> (search keyword, pattern of the passage that answers it; {x} is the place)
_FACTS = (
    (r"what is the capital of (\w+)\?", "capital", r"the capital of {x} is (\w+)\."),
    (r"in which year was (\w+) founded\?", "founded", r"{x} was founded in (\d+)\."),
    (r"which river flows through (\w+)\?", "river", r"the river (\w+) flows through {x}\."),
)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetrievalExpertConfig:
  """How often the expert errs. Every rate is a probability per episode.

  Attributes:
    tool_name: the search tool's name in calls.
    skip_search_rate: answers at once with an invented word instead of searching.
    wrong_keyword_rate: searches with another fact's keyword (then answers what it finds, or
      guesses when the passage is not there).
    wrong_passage_rate: answers with a word of a retrieved passage that does not hold the fact.
    typo_rate: answers with one letter or digit of the right word changed.
    redundant_rate: repeats its search once before answering.
  """
  tool_name: str = "search"
  skip_search_rate: float = 0.15
  wrong_keyword_rate: float = 0.10
  wrong_passage_rate: float = 0.10
  typo_rate: float = 0.05
  redundant_rate: float = 0.10

  def __post_init__(self):
    calculator_expert.check_rates(self)


def parse_question(question: str) -> tuple[str, str, str]:
  """(place, search keyword, answering-passage pattern) of a suite question.

  Raises:
    ValueError: a question the suite does not generate.
  """
  for question_pattern, keyword, passage_pattern in _FACTS:
    match = re.fullmatch(question_pattern, question)
    if match:
      place = match.group(1)
      return place, keyword, passage_pattern.format(x=re.escape(place))
  raise ValueError(f"not a retrieval-suite question: {question!r}")


def _misspell(word: str, rng: np.random.Generator) -> str:
  i = int(rng.integers(len(word)))
  alphabet = "0123456789" if word[i].isdigit() else _LETTERS
  choices = [c for c in alphabet if c != word[i]]
  return word[:i] + choices[int(rng.integers(len(choices)))] + word[i + 1:]


def _invented(rng: np.random.Generator) -> str:
  return "".join(rng.choice(list(_LETTERS), size=int(rng.integers(4, 8))))


class RetrievalExpert:
  """Writes the next segment of a retrieval episode, reading the observations so far.

  An episode's slips are drawn once, before it starts (`plan`), and passed to every
  `next_segment` of that episode.
  """

  def __init__(self, config: RetrievalExpertConfig = RetrievalExpertConfig()):
    self.config = config

  def _call(self, query: str) -> str:
    return f"{episodes_lib.CALL_OPEN}{self.config.tool_name}({query}){episodes_lib.CALL_CLOSE}"

  def _answer(self, text: str) -> str:
    return f"{episodes_lib.ANSWER_OPEN}{text}{episodes_lib.ANSWER_CLOSE}"

  def plan(self, rng: np.random.Generator) -> dict[str, bool]:
    """The slips of one episode."""
    c = self.config
    return {"skip": rng.random() < c.skip_search_rate,
            "wrong_keyword": rng.random() < c.wrong_keyword_rate,
            "wrong_passage": rng.random() < c.wrong_passage_rate,
            "typo": rng.random() < c.typo_rate,
            "redundant": rng.random() < c.redundant_rate}

  def next_segment(self, episode: episodes_lib.Episode, rng: np.random.Generator, *,
                   max_tool_calls: int, plan: dict[str, bool]) -> str:
    """The expert's next segment, ending in `</call>` or `</answer>`."""
    place, keyword, passage_pattern = parse_question(episode.task.question)
    calls = episode.calls
    if not calls:
      if plan["skip"]:
        return self._answer(_invented(rng))
      if plan["wrong_keyword"]:
        keyword = [k for _, k, _ in _FACTS if k != keyword][int(rng.integers(len(_FACTS) - 1))]
      return self._call(f"{keyword} {place}")
    last = calls[-1]
    if (plan["redundant"] and len(calls) == 1 and last.status == CallStatus.OK
        and len(calls) < max_tool_calls):
      return self._call(last.call.arguments)
    observation = last.observation if last.status == CallStatus.OK else ""
    found = re.search(passage_pattern, observation)
    if plan["wrong_passage"]:
      words = [w for text in retrieval.retrieved_passages([observation]).values()
               if not re.search(passage_pattern, text)
               for w in retrieval.normalize(text).split() if w != place and len(w) > 3]
      if words:
        return self._answer(words[int(rng.integers(len(words)))])
    if found is None:
      return self._answer(_invented(rng))
    answer = found.group(1)
    return self._answer(_misspell(answer, rng) if plan["typo"] else answer)


def run_expert_episodes(expert: RetrievalExpert, tasks, *, toolbox, rng: np.random.Generator,
                        max_tool_calls: int) -> list[episodes_lib.Episode]:
  """Plays one episode per task with the real (guarded) search tool."""
  plans = {}

  def next_segment(episode, rng):
    if not episode.actions:  # the episode's plan is drawn before its first segment
      plans[id(episode)] = expert.plan(rng)
    return expert.next_segment(episode, rng, max_tool_calls=max_tool_calls,
                               plan=plans[id(episode)])

  return episodes_lib.play(next_segment, tasks, toolbox_for=lambda task: toolbox, rng=rng,
                           max_tool_calls=max_tool_calls)
