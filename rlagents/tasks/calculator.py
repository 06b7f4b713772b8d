"""The calculator task suite: generated arithmetic problems, a strict verifier and disjoint splits.

A problem is an expression such as `347*29+5`; the question the model reads is `347*29+5=?` and the
answer is the exact integer. Host code, not jittable.

Splits:
  train        the training distribution.
  heldout      the same distribution, disjoint problems: for model selection.
  heldout_ood  harder problems (more operands and/or digits) outside the training distribution.
  calibration  the same distribution as train, never used for training or model selection.

Train, heldout and calibration are disjoint by construction: an expression's split is a fixed
function of the sha256 of its text (`_HELDOUT_FRACTION` and `_CALIBRATION_FRACTION` of all
expressions are reserved for heldout and calibration), so it never depends on the seed or on the
split sizes, and problems held out under one config are never trained on under another.
heldout_ood excludes every expression the in-distribution generator could write.
"""

import dataclasses
import hashlib
import re
from typing import Callable

import numpy as np

from rlagents import tools
from rlagents.tasks import _proposals

SPLITS = ("train", "heldout", "heldout_ood", "calibration")
# The split of a task the policy proposed itself (self-play); never an evaluation split.
PROPOSED_SPLIT = "proposed"
# What the policy reads in its proposer role; it answers with an expression.
PROPOSER_PROMPT = "propose:"

_HELDOUT_FRACTION = 0.1
_CALIBRATION_FRACTION = 0.1
_OPERATORS = "+-*"
# Answers are stored as int64: an expression over n operands of at most d digits has
# |value| <= prod(operand + 1) <= 10**(n * d), so n * d <= 18 keeps it below 2**63.
_MAX_TOTAL_DIGITS = 18
# Expressions are drawn in fixed-size batches, so the problems depend only on the seed.
_DRAW_BATCH = 1024
# Generation gives up (instead of looping forever) after this many draws per requested problem.
_MAX_DRAWS_PER_PROBLEM = 100


@dataclasses.dataclass(frozen=True)
class CalculatorTask:
  """One arithmetic problem.

  Attributes:
    task_id: `{split}-{16 hex digits of sha256(expression)}`, unique within the suite.
    expression: the expression without spaces, e.g. `347*29+5`.
    answer: its exact value.
    split: one of `SPLITS`.
    num_operands: how many numbers the expression has.
    max_digits: the digit count of its longest number.
  """
  task_id: str
  expression: str
  answer: int
  split: str
  num_operands: int
  max_digits: int

  @property
  def prompt(self) -> str:
    """The question the model reads, e.g. `347*29+5=?`."""
    return f"{self.expression}=?"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CalculatorSuiteConfig:
  """What problems the suite holds. Every field changes the generated data.

  Attributes:
    seed: seeds the problem generator; same config, same problems, on any machine.
    num_train: problems in the train split.
    num_heldout: problems in the heldout split.
    num_heldout_ood: problems in the heldout_ood split.
    num_calibration: problems in the calibration split.
    num_operands: numbers per in-distribution expression.
    min_digits: fewest digits of a number (every split). A number's digit count is uniform in
      [min_digits, max digits], then its value is uniform among numbers with that many digits.
    max_digits: most digits of an in-distribution number.
    ood_num_operands: numbers per heldout_ood expression (at least num_operands).
    ood_max_digits: most digits of a heldout_ood number (at least max_digits).
    operators: the binary operators to draw from, uniformly; a non-empty subset of `+-*`.
  """
  seed: int = 0
  num_train: int = 20000
  num_heldout: int = 500
  num_heldout_ood: int = 500
  num_calibration: int = 500
  num_operands: int = 3
  min_digits: int = 1
  max_digits: int = 3
  ood_num_operands: int = 4
  ood_max_digits: int = 3
  operators: str = "+-*"

  def __post_init__(self):
    def fail(field: str, requirement: str):
      raise ValueError(
          f"CalculatorSuiteConfig.{field}={getattr(self, field)!r}: {requirement}")

    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if field.type is int and (not isinstance(value, int) or isinstance(value, bool)):
        fail(field.name, "must be an int")
    if self.seed < 0:
      fail("seed", "must be >= 0")
    for field in ("num_train", "num_heldout", "num_heldout_ood", "num_calibration",
                  "num_operands", "min_digits"):
      if getattr(self, field) < 1:
        fail(field, "must be >= 1")
    if self.max_digits < self.min_digits:
      fail("max_digits", f"must be >= min_digits={self.min_digits}")
    if self.num_operands * self.max_digits > _MAX_TOTAL_DIGITS:
      fail("max_digits", f"num_operands * max_digits must be <= {_MAX_TOTAL_DIGITS} "
           "so answers fit in int64")
    if self.ood_num_operands < self.num_operands:
      fail("ood_num_operands", f"must be >= num_operands={self.num_operands}")
    if self.ood_max_digits < self.max_digits:
      fail("ood_max_digits", f"must be >= max_digits={self.max_digits}")
    if (self.ood_num_operands, self.ood_max_digits) == (self.num_operands, self.max_digits):
      fail("ood_num_operands", "ood_num_operands or ood_max_digits must exceed its "
           "in-distribution value")
    if self.ood_num_operands * self.ood_max_digits > _MAX_TOTAL_DIGITS:
      fail("ood_max_digits", f"ood_num_operands * ood_max_digits must be <= "
           f"{_MAX_TOTAL_DIGITS} so answers fit in int64")
    if (not isinstance(self.operators, str) or not self.operators
        or not set(self.operators) <= set(_OPERATORS)
        or len(set(self.operators)) != len(self.operators)):
      fail("operators", f"must be distinct characters from {_OPERATORS!r}")
    # Ask for at most half of a split's expected share of distinct expressions, so drawing
    # fills it quickly rather than hunting for the last few unseen problems.
    in_distribution = self._num_expressions(self.num_operands, self.max_digits)
    share = {"num_heldout": _HELDOUT_FRACTION, "num_calibration": _CALIBRATION_FRACTION,
             "num_train": 1.0 - _HELDOUT_FRACTION - _CALIBRATION_FRACTION}
    available = {field: in_distribution * fraction for field, fraction in share.items()}
    available["num_heldout_ood"] = (
        self._num_expressions(self.ood_num_operands, self.ood_max_digits)
        - (in_distribution if self.ood_num_operands == self.num_operands else 0))
    for field, count in available.items():
      if getattr(self, field) > count / 2:
        fail(field, f"must be <= {int(count / 2)}, half the distinct problems available to "
             "it; raise the digits or operands")

  def _num_expressions(self, num_operands: int, max_digits: int) -> int:
    """How many distinct expressions the generator can write."""
    smallest = 0 if self.min_digits == 1 else 10**(self.min_digits - 1)
    return (10**max_digits - smallest)**num_operands * len(self.operators)**(num_operands - 1)


def _draw_expressions(rng: np.random.Generator, count: int, *, num_operands: int,
                      min_digits: int, max_digits: int, operators: str) -> list[str]:
  """`count` random expressions such as `347*29+5` (duplicates possible)."""
  digits = rng.integers(min_digits, max_digits + 1, size=(count, num_operands))
  lowest = np.where(digits == 1, 0, 10**(digits - 1))
  numbers = rng.integers(lowest, 10**digits)
  symbols = rng.choice(list(operators), size=(count, num_operands - 1))
  expressions = []
  for row_numbers, row_symbols in zip(numbers.tolist(), symbols.tolist()):
    parts = [str(row_numbers[0])]
    for symbol, number in zip(row_symbols, row_numbers[1:]):
      parts += [symbol, str(number)]
    expressions.append("".join(parts))
  return expressions


def _digest(expression: str) -> bytes:
  return hashlib.sha256(expression.encode("ascii")).digest()


def _in_distribution_split(expression: str) -> str:
  """The split an in-distribution expression belongs to, fixed by its text alone."""
  position = int.from_bytes(_digest(expression)[:8], "big") / 2**64
  if position < _HELDOUT_FRACTION:
    return "heldout"
  if position < _HELDOUT_FRACTION + _CALIBRATION_FRACTION:
    return "calibration"
  return "train"


def _make_task(expression: str, split: str) -> CalculatorTask:
  numbers = re.findall(r"[0-9]+", expression)
  return CalculatorTask(
      task_id=f"{split}-{_digest(expression).hex()[:16]}",
      expression=expression,
      answer=tools.evaluate_expression(expression),
      split=split,
      num_operands=len(numbers),
      max_digits=max(len(number) for number in numbers),
  )


def _fill_splits(draw: Callable[[int], list[str]], assign: Callable[[str], str | None],
                 sizes: dict[str, int]) -> dict[str, list[CalculatorTask]]:
  """Draws expressions until each split holds `sizes[split]` distinct ones, in draw order.

  `assign` maps an expression to its split, or to None to discard it.
  """
  tasks = {split: [] for split in sizes}
  seen = {split: set() for split in sizes}
  max_draws = _MAX_DRAWS_PER_PROBLEM * sum(sizes.values())
  num_drawn = 0
  while any(len(tasks[split]) < size for split, size in sizes.items()):
    if num_drawn >= max_draws:
      short = [split for split, size in sizes.items() if len(tasks[split]) < size]
      raise RuntimeError(f"could not draw enough distinct problems for splits {short}; "
                         "raise the digits or operands, or ask for fewer problems")
    for expression in draw(_DRAW_BATCH):
      split = assign(expression)
      if (split is None or len(tasks[split]) == sizes[split]
          or expression in seen[split]):
        continue
      seen[split].add(expression)
      tasks[split].append(_make_task(expression, split))
    num_drawn += _DRAW_BATCH
  return tasks


def generate_suite(config: CalculatorSuiteConfig) -> dict[str, list[CalculatorTask]]:
  """Generates every split; deterministic given `config`.

  Returns:
    `{split: tasks}` for each split in `SPLITS`, in that order.
  """
  in_distribution_rng, ood_rng = (
      np.random.default_rng(s) for s in np.random.SeedSequence(config.seed).spawn(2))

  def draw_in_distribution(count: int) -> list[str]:
    return _draw_expressions(
        in_distribution_rng, count, num_operands=config.num_operands,
        min_digits=config.min_digits, max_digits=config.max_digits,
        operators=config.operators)

  def draw_ood(count: int) -> list[str]:
    return _draw_expressions(
        ood_rng, count, num_operands=config.ood_num_operands,
        min_digits=config.min_digits, max_digits=config.ood_max_digits,
        operators=config.operators)

  def assign_ood(expression: str) -> str | None:
    numbers = re.findall(r"[0-9]+", expression)
    could_be_in_distribution = (
        len(numbers) == config.num_operands
        and all(len(number) <= config.max_digits for number in numbers))
    return None if could_be_in_distribution else "heldout_ood"

  tasks = _fill_splits(
      draw_in_distribution, _in_distribution_split,
      {"train": config.num_train, "heldout": config.num_heldout,
       "calibration": config.num_calibration})
  tasks |= _fill_splits(draw_ood, assign_ood, {"heldout_ood": config.num_heldout_ood})
  return {split: tasks[split] for split in SPLITS}


def parse_answer(text: str) -> int | None:
  """Reads a final answer strictly: an optional `-` then ascii digits, whitespace around.

  Returns:
    The integer, or None for anything else (`14.0`, `1 4`, `+14`, `14abc`, an empty string, or
    more than 32 digits, which no answer has).
  """
  match = re.fullmatch(r"-?[0-9]{1,32}", text.strip())
  return int(match.group()) if match else None


def is_correct(task: CalculatorTask, answer_text: str) -> bool:
  """Whether `answer_text` parses (see `parse_answer`) to the task's answer."""
  return parse_answer(answer_text) == task.answer


def proposal_grammar(config: CalculatorSuiteConfig) -> _proposals.ProposalGrammar:
  """How the policy proposes calculator problems (self-play; see `tasks.ProposalGrammar`).

  A proposal is an expression over the suite's operators: 1 to `18 // ood_max_digits`
  non-negative numbers of at most `ood_max_digits` digits, without leading zeros or spaces
  (so its text is its canonical form), e.g. `12*345+6-78`; a lone number is the smallest
  problem. Its answer is what the real calculator tool returns (no transient failure). A
  proposal is reserved for `heldout` or `calibration` when it has the in-distribution shape and
  its hash puts it there (the rule that assigns the splits); `heldout_ood` problems are caught
  by the checker by their text.
  """
  digits, operators = config.ood_max_digits, config.operators
  max_operands = _MAX_TOTAL_DIGITS // digits
  number = f"(?:0|[1-9][0-9]{{0,{digits - 1}}})"
  pattern = re.compile(f"{number}(?:[{re.escape(operators)}]{number}){{0,{max_operands - 1}}}")
  calculator_tool = tools.CalculatorTool(failure_rate=0.0)
  no_failures = np.random.default_rng(0)  # unused: the tool draws only for its failure rate

  def to_task(text: str) -> CalculatorTask:
    if not pattern.fullmatch(text):
      raise _proposals.InvalidProposal(
          f"{text!r} is not 1-{max_operands} numbers of at most {digits} digits joined by "
          f"{operators!r}")
    try:
      answer = int(calculator_tool(text, no_failures))
    except tools.ToolError as error:
      raise _proposals.UnsolvableProposal(f"{text!r}: {error}") from None
    if abs(answer) >= 2**63:
      raise _proposals.UnsolvableProposal(f"{text!r}: the answer does not fit int64")
    numbers = re.findall(r"[0-9]+", text)
    return CalculatorTask(task_id=f"{PROPOSED_SPLIT}-{_digest(text).hex()[:16]}",
                          expression=text, answer=answer, split=PROPOSED_SPLIT,
                          num_operands=len(numbers),
                          max_digits=max(len(n) for n in numbers))

  def reserved_split(expression: str) -> str | None:
    numbers = re.findall(r"[0-9]+", expression)
    in_distribution = (len(numbers) == config.num_operands
                       and all(len(n) <= config.max_digits for n in numbers))
    split = _in_distribution_split(expression) if in_distribution else "train"
    return None if split == "train" else split

  def difficulty(task: CalculatorTask) -> dict[str, float]:
    return {"operands": float(task.num_operands), "length": float(len(task.expression)),
            "max_digits": float(task.max_digits)}

  def demonstrations(train_tasks, rng: np.random.Generator) -> list[str]:
    # A training expression cut after a random number of its operands, so the warm-started
    # proposer has seen that the count varies (and never more operands than training has).
    texts = []
    for task in train_tasks:
      parts = re.findall(r"[0-9]+|[^0-9]", task.expression)
      keep = int(rng.integers(1, task.num_operands + 1))
      texts.append("".join(parts[:2 * keep - 1]))
    return texts

  def compose(first: CalculatorTask, second: CalculatorTask, rng: np.random.Generator) -> str:
    # The first expression, an operator, then the second's operands up to a random count
    # between one more than the first has and the grammar's limit: longer than training's.
    parts = (re.findall(r"[0-9]+|[^0-9]", first.expression)
             + [operators[int(rng.integers(len(operators)))]]
             + re.findall(r"[0-9]+|[^0-9]", second.expression))
    most = min((len(parts) + 1) // 2, max_operands)
    keep = int(rng.integers(min(first.num_operands + 1, most), most + 1))
    return "".join(parts[:2 * keep - 1])

  return _proposals.ProposalGrammar(
      prompt=PROPOSER_PROMPT, to_task=to_task, key=lambda task: task.expression,
      reserved_split=reserved_split, difficulty=difficulty, demonstrations=demonstrations,
      compose=compose)
