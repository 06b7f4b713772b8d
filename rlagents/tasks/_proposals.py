"""Proposals: how a task suite lets the policy write its own tasks (self-play), and the
checker that decides which proposals become training tasks.

A suite that supports self-play gives a `ProposalGrammar` (`TaskSuite.proposals`): the prompt
the policy reads in its proposer role, how a proposal's text becomes a task (the ground truth
computed by the suite's real tool or verifier), the key that identifies a task, which
evaluation split a key is reserved for, the difficulty figures to log, and proposal texts for
the proposer's warm start. `ProposalChecker` applies it with the suite's splits: a proposal is
accepted only when it is valid, solvable, not a duplicate of an earlier proposal, and not a
task of (or reserved for) an evaluation split; every rejection is counted by its reason.

    grammar = tasks.ProposalGrammar(
        prompt="new word:", to_task=make_word_task, key=lambda task: task.word,
        reserved_split=lambda key: None, difficulty=lambda task: {"length": len(task.word)},
        demonstrations=lambda tasks, rng: [t.word for t in tasks])

Host code.
"""

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

# Why a proposal was not accepted, in the order the checker looks.
REJECTIONS = ("unanswered", "invalid", "unsolvable", "duplicate", "eval_split")


class InvalidProposal(ValueError):
  """A proposal outside the suite's grammar; the message says why."""


class UnsolvableProposal(ValueError):
  """A well-formed proposal the suite's tool or verifier cannot solve (no ground truth)."""


@dataclasses.dataclass(frozen=True)
class ProposerTask:
  """The proposer role's episode: the grammar prompt, nothing to verify.

  Attributes:
    task_id: `proposer-{step}-{index}`.
    prompt_text: what the policy reads (the grammar's prompt).
  """
  task_id: str
  prompt_text: str

  @property
  def prompt(self) -> str:
    return self.prompt_text


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProposalGrammar:
  """What a suite provides so that its tasks can be proposed by the policy.

  Attributes:
    prompt: the proposer's prompt; the policy answers it with a task in the grammar, written
      as its final answer (`<answer>...</answer>`).
    to_task: `to_task(text)` -> a task of the suite whose ground truth the suite's real tool or
      verifier computed; raises `InvalidProposal` for text outside the grammar and
      `UnsolvableProposal` when the tool or verifier finds no answer.
    key: `key(task)` -> the canonical text that identifies a task (duplicates and evaluation
      tasks are found by it).
    reserved_split: `reserved_split(key)` -> the evaluation split a task with this key belongs
      to by the suite's own assignment (e.g. a hash of its text), or None; tasks of the
      evaluation splits themselves are caught besides, by their keys.
    difficulty: `difficulty(task)` -> named figures (e.g. length, operands), logged as
      `selfplay/proposal_<name>`.
    demonstrations: `demonstrations(train_tasks, rng)` -> one proposal text per task, written
      from training tasks: the proposer role's examples in the SFT warm start.
    compose: `compose(first, second, rng)` -> one proposal text built from two training tasks
      and larger than the first (e.g. its expression extended by the second's), so that the
      proposer's warm start can show tasks beyond training's sizes
      (`selfplay.composed_demonstrations`); None when the suite has no such composition.
  """
  prompt: str
  to_task: Callable[[str], Any]
  key: Callable[[Any], str]
  reserved_split: Callable[[str], str | None]
  difficulty: Callable[[Any], Mapping[str, float]]
  demonstrations: Callable[[Sequence[Any], np.random.Generator], list[str]]
  compose: Callable[[Any, Any, np.random.Generator], str] | None = None


@dataclasses.dataclass
class Verdict:
  """What the checker decided about one proposal.

  Attributes:
    task: the accepted task, else None.
    reason: '' when accepted, else one of `REJECTIONS`.
    split: the evaluation split a rejected proposal fell in ('' otherwise).
  """
  task: Any
  reason: str
  split: str = ""

  @property
  def accepted(self) -> bool:
    return not self.reason


class ProposalChecker:
  """Accepts or rejects proposals for one run; counts the rejections by reason.

  Args:
    grammar: the suite's `ProposalGrammar`.
    eval_tasks: split name -> tasks of every evaluation split (their keys are never trained).
  """

  def __init__(self, grammar: ProposalGrammar, eval_tasks: Mapping[str, Sequence[Any]]):
    self.grammar = grammar
    self._eval = {grammar.key(task): split for split, tasks in eval_tasks.items()
                  for task in tasks}
    self.seen: set[str] = set()
    self.counts = {reason: 0 for reason in ("accepted",) + REJECTIONS}
    self.eval_split_counts = {split: 0 for split in eval_tasks}

  def check(self, answer: str | None) -> Verdict:
    """The verdict on one proposal (the proposer's answer text, None when it gave none)."""
    verdict = self._verdict(answer)
    self.counts[verdict.reason or "accepted"] += 1
    if verdict.split:
      self.eval_split_counts[verdict.split] = self.eval_split_counts.get(verdict.split, 0) + 1
    return verdict

  def _verdict(self, answer: str | None) -> Verdict:
    if answer is None:
      return Verdict(None, "unanswered")
    try:
      task = self.grammar.to_task(answer.strip())
    except InvalidProposal:
      return Verdict(None, "invalid")
    except UnsolvableProposal:
      return Verdict(None, "unsolvable")
    key = self.grammar.key(task)
    split = self._eval.get(key) or self.grammar.reserved_split(key)
    if split:
      return Verdict(None, "eval_split", split)
    if key in self.seen:
      return Verdict(None, "duplicate")
    self.seen.add(key)
    return Verdict(task, "")

  def state(self) -> dict[str, Any]:
    """JSON values to restore the checker from (`load`): seen keys and counts."""
    return {"seen": sorted(self.seen), "counts": dict(self.counts),
            "eval_split_counts": dict(self.eval_split_counts)}

  def load(self, state: Mapping[str, Any]) -> None:
    """Restores what `state()` returned."""
    self.seen = set(state["seen"])
    self.counts.update(state["counts"])
    self.eval_split_counts.update(state["eval_split_counts"])
