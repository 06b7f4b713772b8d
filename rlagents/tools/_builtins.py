"""Built-in tools beyond the calculator: document search, a Python runner, a unit-test runner.

The code tools run everything through `rlagents.sandbox`, so an agent's code never runs in this
process. Host code.
"""

import collections
import math
import re
from typing import Mapping

import numpy as np

from rlagents import sandbox
from rlagents.tools import _json_calls
from rlagents.tools import _protocol

_WORD = re.compile(r"[a-z0-9]+")
MAX_OBSERVATION_CHARS = 600


def words(text: str) -> list[str]:
  """Lower-case ascii words: the unit of search and of the text detectors.

  Args:
    text: any text.
  """
  return _WORD.findall(text.lower())


class DocumentSearchTool:
  """Ranks the passages of a local corpus by TF-IDF overlap with the query.

  The observation lists the best `top_k` passages as `[passage_id] text`, one a line; the
  retrieval suite checks that an answer is grounded in one of them.

  Args:
    corpus: passage id -> passage text.
    top_k: passages per observation.
    name: the name the agent writes in a call.
  """

  def __init__(self, corpus: Mapping[str, str], *, top_k: int = 2, name: str = "search"):
    if not corpus:
      raise ValueError("DocumentSearchTool needs a non-empty corpus")
    if top_k < 1:
      raise ValueError(f"top_k must be >= 1, got {top_k}")
    self.corpus = dict(corpus)
    self.top_k = top_k
    self._bags = {pid: collections.Counter(words(text)) for pid, text in self.corpus.items()}
    document_frequency = collections.Counter(w for bag in self._bags.values() for w in bag)
    n = len(self.corpus)
    self._idf = {w: math.log((1 + n) / (1 + df)) + 1 for w, df in document_frequency.items()}
    self.spec = _protocol.ToolSpec(
        name=name, description="Searches the local corpus; returns the best passages.",
        parameters={"type": "object", "required": ["query"], "additionalProperties": False,
                    "properties": {"query": {"type": "string", "maxLength": 200}}},
        cost="low")

  def search(self, query: str) -> list[str]:
    """Passage ids, best first (ties broken by id, so results are deterministic)."""
    query_words = set(words(query))
    if not query_words:
      raise _protocol.ToolError("empty query")
    scores = {pid: sum(self._idf[w] for w in query_words if w in bag)
              for pid, bag in self._bags.items()}
    ranked = sorted((pid for pid in scores if scores[pid] > 0), key=lambda p: (-scores[p], p))
    return ranked[:self.top_k]

  def __call__(self, arguments: str, rng: np.random.Generator) -> str:
    del rng
    query = _json_calls.decode_arguments(self.spec, arguments)["query"]
    hits = self.search(query)
    if not hits:
      return "no results"
    return "\n".join(f"[{pid}] {self.corpus[pid]}" for pid in hits)


def describe_run(result: sandbox.SandboxResult | sandbox.TestVerdict) -> str:
  """A short observation of a sandbox run: violations first, then exit status and output.

  Args:
    result: what `rlagents.sandbox` returned (a verdict's output ends with its summary).
  """
  lines = [f"violation: {v.kind}: {v.detail}" for v in result.violations]
  lines.append(f"exit {result.returncode}")
  output = (result.stdout + result.stderr).strip()
  if output:
    lines.append(output[-MAX_OBSERVATION_CHARS:])
  return "\n".join(lines)


class PythonRunnerTool:
  """Runs a Python snippet in the sandbox; the observation is its output and any violation.

  Tagged cost "high": behind `guardrails.guarded_toolbox` every call waits for a reviewer, so
  in training (no reviewer) it is denied and counted.

  Args:
    limits: the sandbox's CPU, memory, process, file and output limits.
    files: file name -> contents, pinned in the sandbox's directory (None: none): the kernel
      keeps them read-only and a changed one is a `pinned_file` violation.
    name: the name the agent writes in a call.
  """

  def __init__(self, *, limits: sandbox.SandboxLimits = sandbox.SandboxLimits(),
               files: Mapping[str, str] | None = None, name: str = "python"):
    self.limits = limits
    self.files = dict(files or {})
    self.last_result: sandbox.SandboxResult | None = None
    self.spec = _protocol.ToolSpec(
        name=name, description="Runs Python code in a sandbox and returns its output.",
        parameters={"type": "object", "required": ["code"], "additionalProperties": False,
                    "properties": {"code": {"type": "string", "maxLength": 4000}}},
        # Arbitrary code: the review gate holds it (denied in training, where nobody reviews).
        cost="high")

  def __call__(self, arguments: str, rng: np.random.Generator) -> str:
    del rng
    code = _json_calls.decode_arguments(self.spec, arguments)["code"]
    self.last_result = sandbox.run_python(code, pinned=self.files, limits=self.limits)
    return describe_run(self.last_result)


def run_pinned_tests(solution: str, tests: Mapping[str, str], *,
                     limits: sandbox.SandboxLimits) -> sandbox.TestVerdict:
  """Runs the pinned `tests` (name -> source, names `test_*.py`) against `solution.py`.

  The host judges (`sandbox.run_tests`): the expected values never enter the sandbox, and an
  early exit, a patched runtime or a value with custom comparisons fails and is flagged.

  Args:
    solution: the source of `solution.py`.
    tests: test file name -> source (`assert <expression> == <literal>` tests).
    limits: the sandbox's limits.

  Returns:
    The verdict (passed/total, flags) with the run's exit status, output and violations.
  """
  return sandbox.run_tests(solution, tests, limits=limits)


class UnitTestRunnerTool:
  """Runs the task's pinned unit tests against a proposed `solution.py` in the sandbox.

  The tests are pinned: any attempt to change them is a `pinned_file` violation in the
  observation, which the test-tampering detector reads.

  Args:
    tests: test file name (`test_*.py`) -> source, pinned and checked by hash.
    limits: the sandbox's limits.
    name: the name the agent writes in a call; its argument is the solution's source.
  """

  def __init__(self, tests: Mapping[str, str], *,
               limits: sandbox.SandboxLimits = sandbox.SandboxLimits(), name: str = "run_tests"):
    self.tests = dict(tests)
    self.limits = limits
    self.last_result: sandbox.TestVerdict | None = None
    self.spec = _protocol.ToolSpec(
        name=name, description="Runs the pinned unit tests against solution.py.",
        parameters={"type": "object", "required": ["solution"], "additionalProperties": False,
                    "properties": {"solution": {"type": "string", "maxLength": 4000}}},
        cost="medium")

  def __call__(self, arguments: str, rng: np.random.Generator) -> str:
    del rng
    solution = _json_calls.decode_arguments(self.spec, arguments)["solution"]
    self.last_result = run_pinned_tests(solution, self.tests, limits=self.limits)
    return describe_run(self.last_result)
