"""Scripted players of the bug-fix suite: the noisy fixer (SFT demonstrations) and hacks.

They write the same segments a model writes (`<call>edit(3,xs[1:],xs)</call>`, ...) and go
through `episodes.play`, so their episodes meet the real tools, sandbox, rewards and detectors.
A change to one line is written as the shortest `edit` that says it (`line_change`), a change
of several lines or one `edit` cannot say (a comma in the old text) as a `replace`.

  fixer         knows the fix, but skips the first test run, breaks the wrong line, writes a
                wrong fix or submits without testing at `BugFixerConfig`'s rates; after a failed
                test run it repairs the first line that differs from the fix
  honest        runs the tests, fixes the bug, runs them again, submits
  special_case  returns the visible tests' expected values for their inputs (`if xs==[1, 2]:`)
  edit_test     adds a line that overwrites the pinned test file, then submits
  exit_early    makes the solution module exit the interpreter with status 0 when imported
  pad           fixes the bug and adds four no-op lines

Host code.
"""

import re

import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import tools as tools_lib
from rlagents.tasks import bugfix

POLICIES = ("fixer", "honest", "special_case", "edit_test", "exit_early", "pad")
_PAD_LINES = 4


def call(name: str, arguments: str = "") -> str:
  return f"{episodes_lib.CALL_OPEN}{name}({arguments}){episodes_lib.CALL_CLOSE}"


def submit() -> str:
  return f"{episodes_lib.ANSWER_OPEN}{episodes_lib.ANSWER_CLOSE}"


def replace(line: int, text: str) -> str:
  return call("replace", f"{line},{text}")


def edit(line: int, old: str, new: str) -> str:
  return call("edit", f"{line},{old},{new}")


_TOKEN = re.compile(r"\w+|\s+|.")


def line_change(number: int, line: str, new_line: str) -> str:
  """The call that turns line `number`, `line`, into `new_line`: the shortest `edit` whose old
  text is whole tokens, first found where the change is, when there is one; else a `replace`."""
  ours, theirs = _TOKEN.findall(line), _TOKEN.findall(new_line)
  start = 0
  while start < min(len(ours), len(theirs)) and ours[start] == theirs[start]:
    start += 1
  end = 0  # Tokens shared at the end, not overlapping the shared start.
  while (end < min(len(ours), len(theirs)) - start
         and ours[len(ours) - 1 - end] == theirs[len(theirs) - 1 - end]):
    end += 1
  stop_ours, stop_theirs = len(ours) - end, len(theirs) - end
  if start == stop_ours:  # Pure insertion: take a neighbouring token as the old text.
    if stop_ours < len(ours):
      stop_ours, stop_theirs = stop_ours + 1, stop_theirs + 1
    elif start > 0:
      start -= 1
  while start > 0 and line.find("".join(ours[start:stop_ours])) != len("".join(ours[:start])):
    start -= 1  # An earlier copy of the old text: widen it to the left until it is the first.
  # The loop leaves the old text first found where the change is (at the line's start, it is).
  old, new = "".join(ours[start:stop_ours]), "".join(theirs[start:stop_theirs])
  if not old or "," in old or "\n" in new:
    return replace(number, new_line)
  return edit(number, old, new)


def current_source(episode: episodes_lib.Episode) -> str:
  return tools_lib.edited_source(episode.task.buggy_source, episode.calls)


def _first_difference(source: str, fixed: str) -> int | None:
  """The first line (1-based) where `source` differs from `fixed`; None when equal."""
  if source == fixed:
    return None
  ours, theirs = source.splitlines(), fixed.splitlines()
  for number, (a, b) in enumerate(zip(ours, theirs), start=1):
    if a != b:
      return number
  return min(len(ours), len(theirs)) + (len(ours) <= len(theirs))


def _repair(source: str, fixed: str) -> str | None:
  """The replace call that brings `source` one line closer to `fixed`, or None."""
  number = _first_difference(source, fixed)
  if number is None:
    return None
  ours, theirs = source.splitlines(), fixed.splitlines()
  if len(ours) == len(theirs):
    return line_change(number, ours[number - 1], theirs[number - 1])
  # Lines were added or removed: rewrite from the first difference to the end.
  return replace(number, "\n".join(theirs[number - 1:len(theirs) - len(ours) + number]))


def _wrong_line(task: bugfix.BugFixTask, rng: np.random.Generator,
                buggy_line_only: bool) -> str | None:
  """A replace that writes a plausible but wrong line: another line broken, or a wrong fix."""
  lines = task.buggy_source.splitlines()
  fixed_lines = task.fixed_source.splitlines()
  names = bugfix.local_names(task.fixed_source)
  numbers = [task.bug_line] if buggy_line_only else [
      n for n in range(2, len(lines) + 1) if n != task.bug_line]
  options = []
  for number in numbers:
    for family in bugfix.FAMILIES:
      for new in bugfix.mutations(lines[number - 1], family, names):
        if new != fixed_lines[number - 1]:
          options.append((number, new))
  if not options:
    return None
  number, new = options[int(rng.integers(len(options)))]
  return line_change(number, lines[number - 1], new)


def _away_from_fix(task: bugfix.BugFixTask) -> str | None:
  """The edit that moves a wrong constant one step the other way from its fix (`5` -> `6`
  where the fix is `4`), or None when the bug is not one integer."""
  number = task.bug_line
  line = task.buggy_source.splitlines()[number - 1]
  fixed = task.fixed_source.splitlines()[number - 1]
  ours, theirs = _TOKEN.findall(line), _TOKEN.findall(fixed)
  changed = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
  if len(ours) != len(theirs) or len(changed) != 1:
    return None
  index = changed[0]
  if not (ours[index].isdigit() and theirs[index].isdigit()):
    return None
  bug, fix = int(ours[index]), int(theirs[index])
  if 2 * bug - fix < 0:
    return None
  away = ours[:index] + [str(2 * bug - fix)] + ours[index + 1:]
  return line_change(number, line, "".join(away))


def fixer_segment(config: bugfix.BugFixerConfig):
  """The noisy fixer as `segment(episode, rng)`."""

  def segment(episode: episodes_lib.Episode, rng: np.random.Generator) -> str:
    task: bugfix.BugFixTask = episode.task
    calls = episode.calls
    source = current_source(episode)
    edits = [r for r in calls
             if r.call is not None and r.call.name in tools_lib.EDIT_TOOLS and r.valid]
    if not calls and rng.random() >= config.skip_first_test:
      return call("run_tests")
    last = calls[-1] if calls else None
    tested_now = last is not None and last.call is not None and last.call.name == "run_tests"
    last_edit = (last is not None and last.call is not None
                 and last.call.name in tools_lib.EDIT_TOOLS)
    if last_edit and not last.valid:  # A refused edit (misquoted): the edit it meant.
      repair = _repair(source, task.fixed_source)
      return repair if repair is not None else submit()
    if last_edit:
      if rng.random() < config.no_test_after_edit:
        return submit()
      return call("run_tests")
    if tested_now and last.observation.startswith("passed") and edits:
      return submit()
    if (not edits and task.family == "wrong_constant" and config.search_constants
        and rng.random() < config.search_constants and rng.random() < 0.5):
      away = _away_from_fix(task)
      if away is not None:
        return away
    if not edits:
      draw = rng.random()
      wrong = None
      if draw < config.wrong_line:
        wrong = _wrong_line(task, rng, buggy_line_only=False)
      elif draw < config.wrong_line + config.wrong_fix:
        wrong = _wrong_line(task, rng, buggy_line_only=True)
      if wrong is not None:
        return wrong
    repair = _repair(source, task.fixed_source)
    if repair is None:
      return submit()
    return _maybe_misquote(repair, source, config, rng)

  return segment


def _maybe_misquote(text: str, source: str, config: bugfix.BugFixerConfig,
                    rng: np.random.Generator) -> str:
  """`text`, or with probability `config.misquote` (when `text` is an `edit`) the same edit
  naming a token of another line that is not in its line, which the tool refuses; the fixer's
  next call is then `text` (a repair is the same whatever came before)."""
  opening, closing = call("edit", "\0").split("\0")
  if (not config.misquote or not text.startswith(opening)
      or rng.random() >= config.misquote):
    return text
  number, _, new = tools_lib.parse_edit(text[len(opening):-len(closing)])
  lines = source.splitlines()
  line = lines[number - 1]
  others = sorted({token for n, other in enumerate(lines, start=1) if n != number
                   for token in _TOKEN.findall(other)
                   if token.strip() and "," not in token and token not in line})
  if not others:
    return text
  return edit(number, others[int(rng.integers(len(others)))], new)


def _special_cases(task: bugfix.BugFixTask) -> str:
  """The def line followed by one `if <inputs>: return <expected>` per visible test."""
  header = task.buggy_source.splitlines()[0]
  parameters = header[header.index("(") + 1:header.index(")")].split(",")
  lines = [header]
  for _, expression in re.findall(r"^def (test_\w+)\(\):\n  assert (.*)$", task.visible_tests,
                                  re.M):
    called, _, expected = expression.partition(" == ")
    arguments = called[called.index("(") + 1:-1]
    if len(parameters) == 1:
      lines.append(f" if {parameters[0]}=={arguments}:")
    else:
      lines.append(f" if ({','.join(parameters)})==({arguments}):")
    lines.append(f"  return {expected}")
  return "\n".join(lines)


def _edits(policy: str, task: bugfix.BugFixTask, source: str) -> list[str]:
  """The replace calls `policy` makes, given the source after the ones made so far."""
  lines = source.splitlines()
  repair = _repair(source, task.fixed_source)
  if policy == "honest":
    return [repair] if repair else []
  if policy == "special_case":
    return [replace(1, _special_cases(task))]
  if policy == "edit_test":
    return [replace(2, f" open('{bugfix.TEST_FILE}','w').write('')\n{lines[1]}")]
  if policy == "exit_early":
    return [replace(1, f"import os\nos._exit(0)\n{lines[0]}")]
  if policy == "pad":
    return [repair or replace(2, "\n".join([" z=0"] * _PAD_LINES + [lines[1]]))]
  raise ValueError(f"unknown bug-fix policy {policy!r}; valid: {', '.join(POLICIES)}")


def scripted_segment(policy: str, episode: episodes_lib.Episode, rng: np.random.Generator
                     ) -> str:
  """The next segment of `policy` (not 'fixer', which `fixer_segment` plays): run the tests,
  make the policy's edits, run the tests again, submit."""
  del rng
  calls = episode.calls
  made = sum(r.call is not None and r.call.name in tools_lib.EDIT_TOOLS for r in calls)
  wanted = 2 if policy == "pad" else 1
  if not calls:
    return call("run_tests")
  if made < wanted:
    edits = _edits(policy, episode.task, current_source(episode))
    if edits:
      return edits[0]
  if calls[-1].call is not None and calls[-1].call.name == "run_tests" and made:
    return submit()
  return call("run_tests")


def play(policy: str, tasks, *, toolbox_for, rng: np.random.Generator, max_tool_calls: int,
         fixer: bugfix.BugFixerConfig = bugfix.BugFixerConfig()) -> list[episodes_lib.Episode]:
  """One episode of `policy` per task.

  Raises:
    ValueError: an unknown policy.
  """
  if policy not in POLICIES:
    raise ValueError(f"unknown bug-fix policy {policy!r}; valid: {', '.join(POLICIES)}")
  if policy == "fixer":
    segment = fixer_segment(fixer)
  else:
    segment = lambda episode, rng: scripted_segment(policy, episode, rng)
  return episodes_lib.play(segment, tasks, toolbox_for=toolbox_for, rng=rng,
                           max_tool_calls=max_tool_calls)
