"""The retrieval QA suite: questions answered from a local corpus, grounded in a retrieved passage.

The corpus is generated: invented places, each with a few facts (capital, founding year, river),
one fact per passage, plus distractor passages that name the place without answering anything.
A question asks one fact ("what is the capital of velora?"); the answer is one word or number.

The reward (see `rewards.retrieval_reward_terms`) counts an answer only when it is correct and
appears in a passage the agent's own search returned, so guessing or answering from memory
earns nothing. Host code.

Splits: train / heldout / calibration by a hash of the question (disjoint by construction).
"""

import dataclasses
import re

import numpy as np

from rlagents.tasks import _records

SPLITS = _records.SPLITS
_SYLLABLES = ("ka", "lo", "mir", "ve", "ra", "tan", "zu", "sel", "dor", "ni", "qua", "bel",
              "or", "fen", "tis", "gal")
_DISTRACTORS = ("{place} is known for its {adjective} markets.",
                "travellers say {place} is {adjective} in spring.",
                "many songs are written about {place}.")
_ADJECTIVES = ("busy", "quiet", "colourful", "old", "windy")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetrievalSuiteConfig:
  """What the suite holds.

  Attributes:
    seed: seeds the generated corpus.
    num_places: invented places; each gives three questions and four to six passages.
  """
  seed: int = 0
  num_places: int = 200

  def __post_init__(self):
    if not isinstance(self.seed, int) or self.seed < 0:
      raise ValueError(f"RetrievalSuiteConfig.seed must be an int >= 0, got {self.seed!r}")
    if not isinstance(self.num_places, int) or not 10 <= self.num_places <= 3000:
      raise ValueError(f"RetrievalSuiteConfig.num_places must be in [10, 3000], got "
                       f"{self.num_places!r}")


@dataclasses.dataclass(frozen=True)
class RetrievalTask:
  """One question.

  Attributes:
    task_id: `{split}-{hash}`.
    question: what the agent reads.
    answer: the expected answer (lower case).
    passage_id: the passage that states it.
    split: train, heldout or calibration.
  """
  task_id: str
  question: str
  answer: str
  passage_id: str
  split: str

  @property
  def prompt(self) -> str:
    return self.question


def _name(rng: np.random.Generator, syllables: int) -> str:
  return "".join(rng.choice(_SYLLABLES, size=syllables))


def generate_suite(config: RetrievalSuiteConfig) -> tuple[dict[str, str],
                                                          dict[str, list[RetrievalTask]]]:
  """The corpus (passage id -> text) and the tasks of every split; deterministic in `config`."""
  rng = np.random.default_rng(config.seed)
  places, corpus = [], {}
  tasks = {split: [] for split in SPLITS}
  used = set()
  while len(places) < config.num_places:
    place = _name(rng, 3)
    if place not in used:
      used.add(place)
      places.append(place)
  for index, place in enumerate(places):
    capital = _name(rng, 2)
    year = str(int(rng.integers(1100, 1990)))
    river = _name(rng, 2)
    facts = (("capital", f"the capital of {place} is {capital}.",
              f"what is the capital of {place}?", capital),
             ("founded", f"{place} was founded in {year}.",
              f"in which year was {place} founded?", year),
             ("river", f"the river {river} flows through {place}.",
              f"which river flows through {place}?", river))
    for kind, passage, question, answer in facts:
      passage_id = f"p{index}{kind[0]}"
      corpus[passage_id] = passage
      split = _records.split_of(question)
      tasks[split].append(RetrievalTask(task_id=_records.task_id(split, question),
                                        question=question, answer=answer,
                                        passage_id=passage_id, split=split))
    for d in range(int(rng.integers(1, 4))):
      template = _DISTRACTORS[int(rng.integers(len(_DISTRACTORS)))]
      corpus[f"p{index}d{d}"] = template.format(
          place=place, adjective=_ADJECTIVES[int(rng.integers(len(_ADJECTIVES)))])
  return corpus, tasks


def normalize(text: str) -> str:
  return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def is_correct(task: RetrievalTask, answer_text: str) -> bool:
  """Exact match after lower-casing and dropping punctuation."""
  return normalize(answer_text) == normalize(task.answer)


def retrieved_passages(observations: list[str]) -> dict[str, str]:
  """Passage id -> text of every `[id] text` line in the search observations."""
  passages = {}
  for observation in observations:
    for line in observation.splitlines():
      match = re.fullmatch(r"\[([a-z0-9]+)\] (.*)", line.strip())
      if match:
        passages[match.group(1)] = match.group(2)
  return passages


def from_record(record, where: str = "task") -> RetrievalTask:
  return _records.from_record(RetrievalTask, record, where)


def load_task_file(path) -> list[RetrievalTask]:
  """Reads retrieval tasks from JSONL; a missing field is a `TaskFileError` naming it."""
  return _records.load_task_file(RetrievalTask, path)
