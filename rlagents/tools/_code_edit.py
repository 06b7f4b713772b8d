"""Tools of a bug-fix episode: view the code, run its visible tests, edit it (host code).

One `CodeWorkspace` per episode holds the current source; its tools share it. Calls are short,
for character-level models:

    view()                      the current source with numbered lines (`3| for x in xs:`)
    run_tests()                 the visible tests on the current source, in the sandbox:
                                `passed 3/3`, or `failed 1/3` and a line per failure
                                (`f([1, 2]) == 3 got 2`); sandbox violations come first
    replace(3, for x in xs:)    line 3 becomes the text after the comma (newlines make more
                                lines); refused, and the code left as it was, when the line
                                does not exist, nothing changes or the result does not parse
    edit(3,xs[1:],xs)           in line 3, the first `xs[1:]` becomes `xs`: the old text runs
                                to the second comma (so it has none), the new text is the rest;
                                refused like `replace`, and when the old text is empty or not
                                in the line

A bug is usually a token or two (`>` for `<`, `5` for `4`), so `edit` lets a character-level
model write the change instead of copying the whole line around it; `replace` remains for
changes that `edit` cannot say (a comma in the old text, several lines).

The episode's answer (`<answer></answer>`) submits the current source. `edited_source` replays
an episode's accepted edits, so the reward never depends on a tool's hidden state.
"""

import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlagents import sandbox
from rlagents.tools import _builtins
from rlagents.tools import _protocol

_REPLACE_ARGUMENTS = re.compile(r"\s*(\d{1,3}),(.*)", re.DOTALL)
_EDIT_ARGUMENTS = re.compile(r"\s*(\d{1,3}),([^,]*),(.*)", re.DOTALL)
EDIT_TOOLS = ("replace", "edit")
_ASSERT = re.compile(r"^def (test_\w+)\(\):\n  assert (.*)$", re.M)
MAX_FAILURES_SHOWN = 1
MAX_EDIT_CHARS = 200
Runner = Callable[[str, Mapping[str, str]], sandbox.TestVerdict]


def number_lines(source: str) -> str:
  """`1|def f(xs):\\n2| t=0\\n...`: what the agent reads of a source.

  Args:
    source: Python source.
  """
  return "".join(f"{i}|{line}\n" for i, line in enumerate(source.splitlines(), start=1))


def parse_replace(arguments: str) -> tuple[int, str]:
  """`(line, text)` of `replace`'s arguments `3, for x in xs:`.

  Args:
    arguments: the text between the call's parentheses.

  Raises:
    ToolError: arguments of another form.
  """
  match = _REPLACE_ARGUMENTS.fullmatch(arguments)
  if match is None:
    raise _protocol.ToolError("use replace(line, text)")
  if len(match.group(2)) > MAX_EDIT_CHARS:
    raise _protocol.ToolError(f"text over {MAX_EDIT_CHARS} chars")
  return int(match.group(1)), match.group(2)


def replace_line(source: str, line: int, text: str) -> str:
  """`source` with line `line` (1-based) replaced by `text`.

  Args:
    source: the current source.
    line: the line to replace, 1-based.
    text: its new text; newlines make several lines.

  Raises:
    ToolError: no such line, no change, or a result that does not parse.
  """
  lines = source.splitlines()
  if not 1 <= line <= len(lines):
    raise _protocol.ToolError(f"no line {line}")
  lines[line - 1:line] = text.split("\n")
  edited = "\n".join(lines) + "\n"
  if edited == source:
    raise _protocol.ToolError("no change")
  try:
    sandbox.parse_python(edited)  # Parsed, never run, on the host.
  except (SyntaxError, ValueError, RecursionError, MemoryError):
    raise _protocol.ToolError(f"syntax error in line {line}") from None
  return edited


def parse_edit(arguments: str) -> tuple[int, str, str]:
  """`(line, old, new)` of `edit`'s arguments `3,xs[1:],xs`.

  Args:
    arguments: the text between the call's parentheses.

  Raises:
    ToolError: arguments of another form, or an empty old text.
  """
  match = _EDIT_ARGUMENTS.fullmatch(arguments)
  if match is None:
    raise _protocol.ToolError("use edit(line,old,new)")
  line, old, new = int(match.group(1)), match.group(2), match.group(3)
  if not old:
    raise _protocol.ToolError("old text is empty")
  if len(old) + len(new) > MAX_EDIT_CHARS:
    raise _protocol.ToolError(f"text over {MAX_EDIT_CHARS} chars")
  return line, old, new


def edit_line(source: str, line: int, old: str, new: str) -> str:
  """`source` with the first `old` in line `line` (1-based) replaced by `new`.

  Args:
    source: the current source.
    line: the line to edit, 1-based.
    old: text in that line.
    new: what replaces its first occurrence; newlines make several lines.

  Raises:
    ToolError: no such line, `old` not in it (the message quotes the line), no change, or a
      result that does not parse.
  """
  lines = source.splitlines()
  if not 1 <= line <= len(lines):
    raise _protocol.ToolError(f"no line {line}")
  if old not in lines[line - 1]:
    # The line, as it is, so that the next try can copy its old text from right here.
    raise _protocol.ToolError(f"no {old} in line {line}: {lines[line - 1].strip()}")
  return replace_line(source, line, lines[line - 1].replace(old, new, 1))


def apply_edit(source: str, name: str, arguments: str) -> str:
  """`source` after one edit-tool call (`name` in `EDIT_TOOLS`).

  Args:
    source: the current source.
    name: the tool, `replace` or `edit`.
    arguments: the text between the call's parentheses.

  Raises:
    ToolError: a refused call, as the tool refuses it.
    ValueError: a name that is not an edit tool.
  """
  if name == "replace":
    return replace_line(source, *parse_replace(arguments))
  if name == "edit":
    return edit_line(source, *parse_edit(arguments))
  raise ValueError(f"{name!r} is not an edit tool; edit tools: {', '.join(EDIT_TOOLS)}")


def edited_source(source: str, calls: Sequence[_protocol.ToolResult]) -> str:
  """`source` after the accepted edit calls (`replace`, `edit`) among `calls`.

  Args:
    source: the episode's starting source.
    calls: the episode's tool results, in order (refused calls change nothing).
  """
  for result in calls:
    if (result.status == _protocol.CallStatus.OK and result.call is not None
        and result.call.name in EDIT_TOOLS):
      source = apply_edit(source, result.call.name, result.call.arguments)
  return source


def describe_tests(verdict: sandbox.TestVerdict, tests: str) -> str:
  """A short observation of a visible-test run: violations, then `passed`/`failed k/n` and up
  to `MAX_FAILURES_SHOWN` failures as `<call> == <expected> got <value>`.

  Args:
    verdict: the host's verdict on the run.
    tests: the visible test module's source (for the failing asserts' text).
  """
  asserts = dict(_ASSERT.findall(tests))
  lines = [f"violation: {v.kind}" for v in dict.fromkeys(verdict.violations)]
  if verdict.ok:
    return "\n".join(lines + [f"passed {verdict.passed}/{verdict.total}"])
  lines.append(f"failed {verdict.total - verdict.passed}/{verdict.total}")
  for failure in verdict.failures[:MAX_FAILURES_SHOWN]:
    test, _, why = failure.partition(": ")
    expression = asserts.get(test.rsplit(".", 1)[-1], test)
    lines.append(f"{expression} {why.replace('(the run ended first)', '').strip()}")
  return "\n".join(lines)


class CodeWorkspace:
  """The source one bug-fix episode edits, and the tools that share it.

  Args:
    source: the starting (buggy) source.
    tests: the visible test module's source (`assert <call> == <literal>` tests).
    runner: `runner(solution, {test file: source}) -> sandbox.TestVerdict`, e.g.
      `sandbox.run_tests` with the suite's limits, or a `sandbox.SandboxPool`'s `run_tests`.
    test_file: the name of the visible test module.
  """

  def __init__(self, source: str, tests: str, *, runner: Runner,
               test_file: str = "test_solution.py"):
    self.source = source
    self.tests = tests
    self.runner = runner
    self.test_file = test_file
    self.last_verdict: sandbox.TestVerdict | None = None

  def tools(self) -> list[Any]:
    """The episode's `view`, `run_tests`, `replace` and `edit` tools, sharing this workspace."""
    return [_View(self), _RunTests(self), _Edit(self, "replace"), _Edit(self, "edit")]


class _View:
  def __init__(self, workspace: CodeWorkspace):
    self.workspace = workspace
    self.spec = _protocol.ToolSpec(name="view", description="Shows the code with line numbers.",
                                   parameters={"type": "string", "maxLength": 0}, cost="low")

  def __call__(self, arguments: str, rng: np.random.Generator) -> str:
    del rng
    if arguments.strip():
      raise _protocol.ToolError("view takes no arguments")
    return number_lines(self.workspace.source)


class _RunTests:
  def __init__(self, workspace: CodeWorkspace):
    self.workspace = workspace
    # Runs agent code in the sandbox: the costly call, which the allow-list names and a review
    # gate configured to hold "medium" calls would hold.
    self.spec = _protocol.ToolSpec(name="run_tests",
                                   description="Runs the visible tests on the code.",
                                   parameters={"type": "string", "maxLength": 0}, cost="medium")

  def __call__(self, arguments: str, rng: np.random.Generator) -> str:
    del rng
    if arguments.strip():
      raise _protocol.ToolError("run_tests takes no arguments")
    workspace = self.workspace
    verdict = workspace.runner(workspace.source, {workspace.test_file: workspace.tests})
    workspace.last_verdict = verdict
    return describe_tests(verdict, workspace.tests)


class _Edit:
  _DESCRIPTIONS = {"replace": "Replaces one line of the code.",
                   "edit": "Replaces the first occurrence of a text in one line of the code."}

  def __init__(self, workspace: CodeWorkspace, name: str):
    self.workspace = workspace
    self.name = name
    self.spec = _protocol.ToolSpec(name=name, description=self._DESCRIPTIONS[name],
                                   parameters={"type": "string"}, cost="low")

  def __call__(self, arguments: str, rng: np.random.Generator) -> str:
    del rng
    self.workspace.source = apply_edit(self.workspace.source, self.name, arguments)
    return "ok"


def default_runner(limits: sandbox.SandboxLimits) -> Runner:
  """`sandbox.run_tests` with `limits`, as a `Runner`.

  Args:
    limits: the sandbox's limits.
  """
  return lambda solution, tests: _builtins.run_pinned_tests(solution, tests, limits=limits)
