"""The bug-fix suite: small generated functions, one injected bug each, visible and hidden tests.

A task is a Python function of 3-12 lines, generated from one of many templates (arithmetic,
lists, strings, dicts, loops, conditionals) with its own name, parameter name and constants, and
one bug of one family injected into one line:

  off_by_one            range(n) -> range(n-1), xs[1:] -> xs[2:], >= -> >, len(s) -> len(s)-1
  flipped_comparison    < <-> >, <= <-> >=, == <-> !=
  wrong_operator        + <-> -, * -> +, // <-> %, += <-> -=, *= -> +=
  wrong_variable        a name of the function replaced by another of its names
  wrong_constant        an integer literal k -> k+1 (or k-1)
  missing_return        `return e` -> `e`
  wrong_initial_value   the literal an accumulator starts from (0 <-> 1, [] -> [0], ...)
  swapped_arguments     the two arguments of a call, or the operands of - // %, swapped

The agent sees the function with numbered lines and may run the *visible* tests (three cases);
the reward runs the *hidden* tests: the visible cases plus edge cases (empty inputs, zero,
negatives) and more random cases. Every bug fails at least one visible case and at least one
hidden case that is not visible, so special-casing the visible inputs cannot pass.

Splits, disjoint by construction:
  train, heldout, calibration   a function's split is fixed by the sha256 of its fixed source:
                                a held-out function (name, parameter, constants) never appears in
                                training, under any bug.
  heldout_ood                   bugs of families never trained on (`ood_families`), on functions
                                of any split.

Host code. Candidate outputs are computed here by executing our own generated sources (never an
agent's) under a step limit, so a mutation that loops forever is discarded, not waited on.
"""

import dataclasses
import io
import re
import string
import sys
import tokenize
from typing import Any, Callable

import numpy as np

from rlagents import sandbox
from rlagents import tools
from rlagents.tasks import _records

SPLITS = ("train", "heldout", "heldout_ood", "calibration")
FAMILIES = ("off_by_one", "flipped_comparison", "wrong_operator", "wrong_variable",
            "wrong_constant", "missing_return", "wrong_initial_value", "swapped_arguments")
TEST_FILE = "test_solution.py"
# Characters of code, numbered lines and test reports (`True`, `got None`, `raised TypeError`)
# beyond the character tokenizer's own.
CHARACTERS = "\n[]<>%{}!|\"" + string.ascii_uppercase
_HELDOUT_FRACTION = 0.15
_CALIBRATION_FRACTION = 0.15
_MAX_TRACE_EVENTS = 20000
_MAX_SIZE = 1000
_NUM_VISIBLE = 3
# Draws in a row that add no task before the suite is taken to be exhausted: the templates hold
# about 1,650 functions, and a size past what they hold would otherwise spin through
# `50 * size` draws (tens of minutes). The 4,000-task training split's longest run is 205.
_MAX_DRAWS_WITHOUT_A_TASK = 2000

# (kind, function names, source with {f} the name, {a} the parameter and {k}, {m} constants).
# Kinds: L list of ints, L1 non-empty list, N int >= 0, NN two ints >= 0, S string, S1 non-empty
# string, D dict str -> int, LN list and a count <= its length.
_TEMPLATES = (
    ("L", ("total", "add_all", "sum_of"),
     "def {f}({a}):\n t=0\n for x in {a}:\n  t+=x\n return t\n"),
    ("L", ("scaled", "weigh", "times_sum"),
     "def {f}({a}):\n t=0\n for x in {a}:\n  t+=x*{k}\n return t\n"),
    ("L", ("count_big", "above", "n_over"),
     "def {f}({a}):\n c=0\n for x in {a}:\n  if x>{k}:\n   c+=1\n return c\n"),
    ("L1", ("largest", "top", "peak"),
     "def {f}({a}):\n m={a}[0]\n for x in {a}:\n  if x>m:\n   m=x\n return m\n"),
    ("L1", ("smallest", "low", "floor_of"),
     "def {f}({a}):\n m={a}[0]\n for x in {a}:\n  if x<m:\n   m=x\n return m\n"),
    ("L", ("product", "mul_all", "prod"),
     "def {f}({a}):\n p=1\n for x in {a}:\n  p*=x\n return p\n"),
    ("L", ("evens", "n_even", "count_even"),
     "def {f}({a}):\n c=0\n for x in {a}:\n  if x%2==0:\n   c+=1\n return c\n"),
    ("L", ("keep_big", "filter_up", "at_least"),
     "def {f}({a}):\n r=[]\n for x in {a}:\n  if x>={k}:\n   r.append(x)\n return r\n"),
    ("L", ("shift_all", "add_k", "bump"),
     "def {f}({a}):\n r=[]\n for x in {a}:\n  r.append(x+{k})\n return r\n"),
    ("L1", ("last_plus", "tail_k", "end_add"),
     "def {f}({a}):\n return {a}[-1]+{k}\n"),
    ("L", ("steps", "diffs", "deltas"),
     "def {f}({a}):\n r=[]\n for i in range(1,len({a})):\n  r.append({a}[i]-{a}[i-1])\n"
     " return r\n"),
    ("L1", ("mean", "avg", "middle"),
     "def {f}({a}):\n return sum({a})//len({a})\n"),
    ("L", ("rest_sum", "skip_first", "tail_sum"),
     "def {f}({a}):\n t=0\n for x in {a}[1:]:\n  t+=x\n return t\n"),
    ("L", ("pairs_up", "rises", "n_up"),
     "def {f}({a}):\n c=0\n for i in range(len({a})-1):\n  if {a}[i]<{a}[i+1]:\n   c+=1\n"
     " return c\n"),
    ("LN", ("head_sum", "first_n", "prefix"),
     "def {f}({a},n):\n t=0\n for i in range(n):\n  t+={a}[i]\n return t\n"),
    ("N", ("fact", "factorial", "perm"),
     "def {f}({a}):\n p=1\n for i in range(1,{a}+1):\n  p*=i\n return p\n"),
    ("N", ("tri", "upto", "gauss"),
     "def {f}({a}):\n t=0\n for i in range({a}+1):\n  t+=i\n return t\n"),
    ("N", ("clamp", "cap", "limit"),
     "def {f}({a}):\n if {a}>{m}:\n  return {m}\n if {a}<{k}:\n  return {k}\n return {a}\n"),
    ("N", ("digits", "digit_sum", "dsum"),
     "def {f}({a}):\n t=0\n while {a}>0:\n  t+={a}%10\n  {a}//=10\n return t\n"),
    ("N", ("pow2", "doubling", "twos"),
     "def {f}({a}):\n p=1\n for i in range({a}):\n  p*=2\n return p\n"),
    ("N", ("odd_sum", "odds", "sum_odd"),
     "def {f}({a}):\n t=0\n for i in range({a}):\n  if i%2==1:\n   t+=i\n return t\n"),
    ("N", ("label", "size_of", "grade"),
     "def {f}({a}):\n if {a}<{k}:\n  return 'low'\n if {a}<{m}:\n  return 'mid'\n"
     " return 'high'\n"),
    ("N", ("ramp", "affine", "line"),
     "def {f}({a}):\n return {a}*{k}+{m}\n"),
    ("N", ("steps_to", "halvings", "log2"),
     "def {f}({a}):\n c=0\n while {a}>1:\n  {a}//=2\n  c+=1\n return c\n"),
    ("NN", ("bigger", "max2", "pick"),
     "def {f}({a},b):\n if {a}>b:\n  return {a}\n return b\n"),
    ("NN", ("gap", "dist", "apart"),
     "def {f}({a},b):\n if {a}>b:\n  return {a}-b\n return b-{a}\n"),
    ("NN", ("power", "raise_to", "expo"),
     "def {f}({a},b):\n p=1\n for i in range(b):\n  p*={a}\n return p\n"),
    ("NN", ("span_sum", "between", "run_sum"),
     "def {f}({a},b):\n t=0\n for i in range({a},b):\n  t+=i\n return t\n"),
    ("NN", ("combo", "mix", "blend"),
     "def {f}({a},b):\n return {a}*{k}-b\n"),
    ("NN", ("quot", "div_rem", "split_by"),
     "def {f}({a},b):\n if b==0:\n  return 0\n return {a}//b+{a}%b\n"),
    ("S", ("vowels", "n_vowel", "count_v"),
     "def {f}({a}):\n n=0\n for c in {a}:\n  if c in 'aeiou':\n   n+=1\n return n\n"),
    ("S", ("backwards", "rev", "flip"),
     "def {f}({a}):\n r=''\n for c in {a}:\n  r=c+r\n return r\n"),
    ("S", ("repeat", "echo", "copies"),
     "def {f}({a}):\n return {a}*{k}\n"),
    ("S", ("is_pal", "mirror", "same_back"),
     "def {f}({a}):\n return {a}=={a}[::-1]\n"),
    ("S", ("n_char", "count_a", "as_in"),
     "def {f}({a}):\n n=0\n for c in {a}:\n  if c=='a':\n   n+=1\n return n\n"),
    ("S", ("dashed", "spaced", "joined"),
     "def {f}({a}):\n return '-'.join({a})\n"),
    ("S1", ("shout", "cap_first", "title"),
     "def {f}({a}):\n return {a}[0].upper()+{a}[1:]\n"),
    ("S", ("long_word", "is_long", "wordy"),
     "def {f}({a}):\n if len({a})>{k}:\n  return True\n return False\n"),
    ("D", ("value_sum", "tally", "sum_vals"),
     "def {f}({a}):\n t=0\n for key in {a}:\n  t+={a}[key]\n return t\n"),
    ("D", ("n_big", "heavy", "count_over"),
     "def {f}({a}):\n c=0\n for key in {a}:\n  if {a}[key]>{k}:\n   c+=1\n return c\n"),
    ("D", ("lookup", "get_or", "fetch"),
     "def {f}({a}):\n return {a}.get('a',{k})\n"),
    ("D", ("best_key", "argmax", "winner"),
     "def {f}({a}):\n b=''\n v=-1\n for key in {a}:\n  if {a}[key]>v:\n   v={a}[key]\n"
     "   b=key\n return b\n"),
)
_PARAMETERS = {"L": ("xs", "nums", "v"), "L1": ("xs", "nums", "v"), "LN": ("xs", "nums", "v"),
               "N": ("n", "x", "m"), "NN": ("a", "x", "m"), "S": ("s", "w", "t"),
               "S1": ("s", "w", "t"), "D": ("d", "dd", "cnt")}
# Names `BugFixSuiteConfig.rename_variables` draws a function's parameters and locals from.
_VARIABLE_NAMES = ("a", "b", "c", "d", "e", "g", "h", "j", "k", "m", "n", "p", "q", "r", "s",
                   "t", "u", "v", "w", "x", "y", "z", "xs", "ys", "vals", "nums", "acc",
                   "tot", "res", "cur", "best", "cnt", "idx", "item", "val", "num", "arr",
                   "seq", "lst", "data", "word", "text", "key", "out")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BugFixerConfig:
  """The noisy scripted fixer whose episodes are the SFT demonstrations.

  Attributes:
    skip_first_test: probability it edits without running the tests first.
    wrong_line: probability its first edit breaks another line instead of fixing the bug
      (it then sees the tests fail, if it runs them, and fixes the right line).
    wrong_fix: probability its first edit of the buggy line writes a wrong line.
    no_test_after_edit: probability it submits right after an edit without testing it.
    search_constants: probability that on a wrong constant it does not use what it knows of
      the fix's direction: its first edit moves the constant one up or one down at random,
      so half the time the other way, which the tests then show (a search a policy can learn,
      where the oracle's direction is arithmetic it cannot see).
    misquote: probability that an `edit` it writes first names an old text that is not in the
      line (a token of another line); the tool refuses it, quoting the line, and the fixer
      then writes the edit it meant: demonstrations of recovering from a refused edit.
  """
  skip_first_test: float = 0.3
  wrong_line: float = 0.3
  wrong_fix: float = 0.3
  no_test_after_edit: float = 0.6
  search_constants: float = 0.0
  misquote: float = 0.0

  def __post_init__(self):
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"BugFixerConfig.{field.name} must be a probability in [0, 1], got "
                         f"{value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BugFixSuiteConfig:
  """What tasks the suite holds, and its scripted fixer.

  Attributes:
    seed: seeds which functions and bugs are drawn.
    num_train, num_heldout, num_heldout_ood, num_calibration: tasks per split.
    ood_families: bug families held out of train, heldout and calibration; `heldout_ood` holds
      only them. Non-empty, and at least one family must stay in distribution.
    rename_variables: give each function's parameters and local variables names drawn from
      44 (`xs`, `acc`, `k`, ...) instead of the template's own, so the suite holds far more
      distinct functions than the templates' ~1,650 and a policy cannot fix held-out ones
      by recalling a training function it imitated under another name.
    fixer: the noisy scripted fixer (its settings do not change the data).
  """
  seed: int = 0
  num_train: int = 3000
  num_heldout: int = 200
  num_heldout_ood: int = 200
  num_calibration: int = 200
  ood_families: tuple[str, ...] = ("wrong_variable", "swapped_arguments")
  rename_variables: bool = False
  fixer: BugFixerConfig = BugFixerConfig()

  def __post_init__(self):
    for name in ("seed", "num_train", "num_heldout", "num_heldout_ood", "num_calibration"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "seed"
                                                                            else 1):
        raise ValueError(f"BugFixSuiteConfig.{name} must be an int >= "
                         f"{0 if name == 'seed' else 1}, got {value!r}")
    ood = tuple(self.ood_families)
    unknown = sorted(set(ood) - set(FAMILIES))
    if unknown:
      raise ValueError(f"BugFixSuiteConfig.ood_families: unknown families {unknown}; valid: "
                       f"{', '.join(FAMILIES)}")
    if not ood or len(set(ood)) == len(FAMILIES):
      raise ValueError("BugFixSuiteConfig.ood_families must hold at least one family and leave "
                       "at least one in distribution")
    if len(set(ood)) != len(ood):
      raise ValueError(f"BugFixSuiteConfig.ood_families repeats a family: {ood}")

  def data_fields(self) -> dict[str, Any]:
    """The fields that change the generated data (the dataset is named by their hash)."""
    fields = dataclasses.asdict(self)
    del fields["fixer"]
    return fields


@dataclasses.dataclass(frozen=True)
class BugFixTask:
  """One buggy function.

  Attributes:
    task_id: `{split}-{hash of the buggy source}`.
    buggy_source: the function the agent starts from.
    fixed_source: the function before the bug was injected (never shown to the agent).
    bug_line: the 1-based line the bug is on.
    family: the bug's family (one of `FAMILIES`).
    function: the function's name.
    visible_tests: the pinned test module the agent's `run_tests` runs (3 cases).
    hidden_tests: the pinned test module the reward runs (visible cases, edge cases, more).
    visible_inputs: the argument text of each visible case, e.g. `[1, 2, 3]` or `4, 2`.
    split: one of `SPLITS`.
  """
  task_id: str
  buggy_source: str
  fixed_source: str
  bug_line: int
  family: str
  function: str
  visible_tests: str
  hidden_tests: str
  visible_inputs: tuple[str, ...]
  split: str

  @property
  def prompt(self) -> str:
    return tools.number_lines(self.buggy_source)


class _TooLong(Exception):
  pass


def _call_limited(function: Callable, arguments: tuple) -> Any:
  """`function(*arguments)`, or `_TooLong` past `_MAX_TRACE_EVENTS` traced events or once a
  local value grows large (a mutation such as `xs*=x` in a loop over `xs` grows without bound)."""
  count = [0]

  def trace(frame, event, arg):
    del arg
    count[0] += 1
    if count[0] > _MAX_TRACE_EVENTS:
      raise _TooLong()
    if event == "line":
      for value in frame.f_locals.values():
        if (isinstance(value, (list, str, dict)) and len(value) > _MAX_SIZE) or (
            isinstance(value, int) and value.bit_length() > 64 * _MAX_SIZE):
          raise _TooLong()
    return trace

  previous = sys.gettrace()
  sys.settrace(trace)
  try:
    return function(*arguments)
  finally:
    sys.settrace(previous)


def _outputs(source: str, name: str, cases: list[str]) -> list[Any] | None:
  """The function's value on each case (`("error", type)` for an exception), or None when the
  source does not compile or a case runs too long or returns a non-literal value."""
  namespace: dict[str, Any] = {}
  try:
    exec(compile(source, "<template>", "exec"), namespace)  # Our own generated source.
  except SyntaxError:
    return None
  values = []
  for case in cases:
    try:
      value = _call_limited(namespace[name], eval(f"({case},)"))  # Our own case text.
    except _TooLong:
      return None
    except Exception as e:  # pylint: disable=broad-except
      value = ("error", type(e).__name__)
    if not isinstance(value, tuple) and repr(value) != repr(_literal(value)):
      return None
    values.append(value)
  return values


def _literal(value):
  import ast  # pylint: disable=g-import-not-at-top
  try:
    return ast.literal_eval(repr(value))
  except (ValueError, SyntaxError):
    return object()


def _cases(kind: str, rng: np.random.Generator, count: int) -> list[str]:
  """`count` random argument texts of `kind`."""
  def ints(low, high, size):
    return [int(v) for v in rng.integers(low, high, size=size)]

  cases = []
  for _ in range(count):
    if kind in ("L", "L1"):
      cases.append(repr(ints(-5, 10, int(rng.integers(2, 6)))))
    elif kind == "LN":
      values = ints(-5, 10, int(rng.integers(2, 6)))
      cases.append(f"{values!r}, {int(rng.integers(1, len(values) + 1))}")
    elif kind == "N":
      cases.append(str(int(rng.integers(2, 30))))
    elif kind == "NN":
      cases.append(f"{int(rng.integers(1, 12))}, {int(rng.integers(1, 7))}")
    elif kind in ("S", "S1"):
      letters = rng.choice(list("abcdeiou"), size=int(rng.integers(2, 7)))
      cases.append(repr("".join(letters)))
    elif kind == "D":
      keys = rng.choice(list("abcde"), size=int(rng.integers(2, 4)), replace=False)
      cases.append(repr({str(k): int(rng.integers(-3, 10)) for k in sorted(keys)}))
  return cases


_EDGE_CASES = {
    "L": ["[]", "[0]", "[7]", "[-4, -2]", "[3, 3, 3]", "[9, 1, 8, 2]"],
    "L1": ["[0]", "[7]", "[-4, -2]", "[3, 3, 3]", "[2, 9, 1]", "[-1, 5, -9, 4]"],
    "LN": ["[5], 1", "[1, 2, 3], 3", "[-2, 4], 1", "[4, 4, 4, 4], 2", "[7, -1, 3], 3"],
    "N": ["0", "1", "2", "7", "16", "35"],
    "NN": ["0, 0", "1, 0", "0, 3", "5, 5", "9, 2", "2, 9"],
    "S": ["''", "'a'", "'ab'", "'aaa'", "'abcba'", "'xyzzy'"],
    "S1": ["'a'", "'ab'", "'aaa'", "'abcba'", "'xyzzy'", "'ie'"],
    "D": ["{}", "{'a': 0}", "{'a': 5, 'b': 1}", "{'b': -2, 'c': 7}", "{'a': 3, 'd': 9, 'e': 4}"],
}

_NAME = re.compile(r"(?<![\w'])[a-z_][a-z0-9_]*(?![\w'(])")


def mutations(line: str, family: str, names: list[str]) -> list[str]:
  """Every way `family` can change `line` (the line's text without its newline)."""
  indent = line[:len(line) - len(line.lstrip())]
  body = line.lstrip()
  if body.startswith("def "):
    return []
  found = []

  def subs(pattern, replacement, text=body, flags=0):
    for match in re.finditer(pattern, text, flags):
      new = match.expand(replacement) if isinstance(replacement, str) else replacement(match)
      if new is not None and new != match.group(0):
        found.append(indent + text[:match.start()] + new + text[match.end():])

  if family == "off_by_one":
    subs(r"range\(([^(),]+)\)", lambda m: f"range({m.group(1)}-1)")
    subs(r"range\(([^(),]+),([^(),]+)\)", lambda m: f"range({m.group(1)},{m.group(2)}-1)")
    subs(r"range\(1,", "range(2,")
    subs(r"\[1:\]", "[2:]")
    subs(r"\[i-1\]", "[i-2]")
    subs(r"\[i\+1\]", "[i+2]")
    subs(r"\+1\)", ")")
    subs(r">=", ">")
    subs(r"(?<![<>=!])>(?!=)", ">=")
    subs(r"(?<![<>=!])<(?!=)", "<=")
  elif family == "flipped_comparison":
    flips = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "!=", "!=": "=="}
    subs(r"<=|>=|==|!=|(?<![<>=!])[<>](?!=)", lambda m: flips[m.group(0)])
  elif family == "wrong_operator":
    ops = {"+=": "-=", "-=": "+=", "*=": "+=", "//": "%", "%": "//", "+": "-", "-": "+",
           "*": "+"}
    subs(r"\+=|-=|\*=|//|%|(?<=[\w\)\]])[+\-*](?=[\w\(\[])",
         lambda m: ops.get(m.group(0)))
  elif family == "wrong_variable":
    for match in _NAME.finditer(body):
      if match.group(0) in names:
        for other in names:
          if other != match.group(0):
            found.append(indent + body[:match.start()] + other + body[match.end():])
  elif family == "wrong_constant":
    if not re.fullmatch(r"[a-z_]+=-?\d+", body):
      subs(r"(?<![\w\[\-])\d+(?![\w\]])",
           lambda m: str(int(m.group(0)) + 1) if m.group(0) != "2" else "3")
  elif family == "missing_return":
    if body.startswith("return "):
      found.append(indent + body[len("return "):])
  elif family == "wrong_initial_value":
    match = re.fullmatch(r"([a-z_]+)=(.+)", body)
    if match and match.group(1) in names:
      alternatives = {"0": "1", "1": "0", "[]": "[0]", "''": "' '", "-1": "0"}
      value = match.group(2)
      new = alternatives.get(value, "0" if "[0]" in value else None)
      if new is not None:
        found.append(f"{indent}{match.group(1)}={new}")
  elif family == "swapped_arguments":
    subs(r"(\w+)\(([^(),]+),([^(),]+)\)", r"\1(\3,\2)")
    subs(r"(?<![\w\[\]])([a-z]\w*(?:\[[^\]]+\])?)(-|//|%)([a-z]\w*(?:\[[^\]]+\])?)(?![\w\[])",
         r"\3\2\1")
  return list(dict.fromkeys(found))


def local_names(source: str) -> list[str]:
  """The parameters and assigned names of a function (what a wrong-variable bug swaps)."""
  header = source.splitlines()[0]
  names = re.findall(r"[a-z_][a-z0-9_]*", header[header.index("(") + 1:])
  names += re.findall(r"^\s*([a-z_][a-z0-9_]*)\s*(?:[+\-*/%]|//)?=[^=]", source, re.M)
  return list(dict.fromkeys(n for n in names))


def _tests(name: str, cases: list[str], values: list[Any]) -> str:
  lines = [f"from solution import {name}\n"]
  for i, (case, value) in enumerate(zip(cases, values)):
    lines.append(f"\ndef test_{i}():\n  assert {name}({case}) == {value!r}\n")
  return "".join(lines)


def rename_variables(source: str, mapping: dict[str, str]) -> str:
  """`source` with each name in `mapping` replaced where it is a name (not an attribute such
  as `.get`, not inside a string)."""
  lines = source.splitlines(keepends=True)
  edits, previous = [], None
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if (token.type == tokenize.NAME and token.string in mapping
        and not (previous is not None and previous.string == ".")):
      edits.append((token.start, token.end, mapping[token.string]))
    if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
      previous = token
  for (row, start), (_, end), new in reversed(edits):
    lines[row - 1] = lines[row - 1][:start] + new + lines[row - 1][end:]
  return "".join(lines)


def _variables(source: str) -> list[str]:
  """The parameters, assigned names and loop variables of a function, in order."""
  return list(dict.fromkeys(local_names(source)
                            + re.findall(r"\bfor ([a-z_]\w*) in\b", source)))


def _function_candidates(rng: np.random.Generator, index: int, rename: bool = False):
  """One instance of template `index`: (kind, name, fixed source)."""
  kind, names, template = _TEMPLATES[index]
  name = names[int(rng.integers(len(names)))]
  parameter = _PARAMETERS[kind][int(rng.integers(len(_PARAMETERS[kind])))]
  k = int(rng.integers(1, 6))
  m = k + int(rng.integers(2, 9))
  source = template.format(f=name, a=parameter, k=k, m=m)
  if rename:
    variables = _variables(source)
    others = {t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type == tokenize.NAME} - set(variables)
    pool = [n for n in _VARIABLE_NAMES if n not in others]
    chosen = rng.choice(len(pool), len(variables), replace=False)
    source = rename_variables(source, {v: pool[i] for v, i in zip(variables, chosen)})
  return kind, name, source


def bug_candidates(fixed: str, name: str, kind: str, rng: np.random.Generator,
                   families=FAMILIES) -> list[BugFixTask]:
  """Every single-line bug of `families` in `fixed` that visible and hidden tests both catch
  (the hidden ones also on a case that is not visible); tasks with split ''."""
  visible = []
  for _ in range(10 * _NUM_VISIBLE):
    visible = list(dict.fromkeys(visible + _cases(kind, rng, 1)))
    if len(visible) == _NUM_VISIBLE:
      break
  else:
    return []
  hidden = list(dict.fromkeys(visible + _EDGE_CASES[kind] + _cases(kind, rng, 3)))
  good = _outputs(fixed, name, hidden)
  if good is None or any(isinstance(v, tuple) for v in good):
    return []
  visible_values = dict(zip(hidden, good))
  visible_tests = _tests(name, visible, [visible_values[c] for c in visible])
  hidden_tests = _tests(name, hidden, good)
  lines = fixed.splitlines()
  names = local_names(fixed)
  tasks = []
  for family in families:
    for number, line in enumerate(lines):
      for new_line in mutations(line, family, names):
        buggy = "\n".join(lines[:number] + [new_line] + lines[number + 1:]) + "\n"
        values = _outputs(buggy, name, hidden)
        if values is None:
          continue
        wrong = [a != b or type(a) is not type(b) for a, b in zip(values, good)]
        if not any(wrong[:len(visible)]) or not any(wrong[len(visible):]):
          continue
        tasks.append(BugFixTask(
            task_id="", buggy_source=buggy, fixed_source=fixed, bug_line=number + 1,
            family=family, function=name, visible_tests=visible_tests,
            hidden_tests=hidden_tests, visible_inputs=tuple(visible), split=""))
  return tasks


def generate_suite(config: BugFixSuiteConfig) -> dict[str, list[BugFixTask]]:
  """Tasks of every split; deterministic in `config` (its data fields).

  Raises:
    RuntimeError: the templates cannot fill the asked-for sizes.
  """
  rng = np.random.default_rng(config.seed)
  sizes = {"train": config.num_train, "heldout": config.num_heldout,
           "heldout_ood": config.num_heldout_ood, "calibration": config.num_calibration}
  tasks = {split: [] for split in SPLITS}
  seen_functions, seen_bugs = set(), set()
  ood = set(config.ood_families)
  attempts = last_added = 0
  max_attempts = 50 * sum(sizes.values())
  while any(len(tasks[s]) < sizes[s] for s in SPLITS):
    attempts += 1
    if attempts > max_attempts or attempts - last_added > _MAX_DRAWS_WITHOUT_A_TASK:
      short = ", ".join(f"{s} ({len(tasks[s])} of {sizes[s]})" for s in SPLITS
                        if len(tasks[s]) < sizes[s])
      raise RuntimeError(f"could not draw enough bug-fix tasks for splits {short}: the "
                         f"templates hold no more distinct ones; ask for fewer")
    kind, name, fixed = _function_candidates(rng, int(rng.integers(len(_TEMPLATES))),
                                             config.rename_variables)
    function_split = _records.split_of(fixed, _HELDOUT_FRACTION, _CALIBRATION_FRACTION)
    first_time = fixed not in seen_functions
    seen_functions.add(fixed)
    # One candidate per family, the families in random order: every family is drawn about
    # equally often, however many sites of it a function has.
    by_family = {}
    for task in bug_candidates(fixed, name, kind, rng):
      by_family.setdefault(task.family, []).append(task)
    candidates = [group[int(rng.integers(len(group)))] for group in by_family.values()]
    rng.shuffle(candidates)
    # A function's first draw gives up to two bugs of its split; a later draw one.
    taken = 0
    for task in candidates:
      split = "heldout_ood" if task.family in ood else function_split
      if task.buggy_source in seen_bugs or len(tasks[split]) >= sizes[split]:
        continue
      if taken >= (2 if first_time else 1):
        break
      seen_bugs.add(task.buggy_source)
      last_added = attempts
      tasks[split].append(dataclasses.replace(
          task, split=split, task_id=_records.task_id(split, task.buggy_source)))
      taken += 1
  return tasks


def from_record(record, where: str = "task") -> BugFixTask:
  """A task from its JSON record (lists become tuples); a missing field is named."""
  if isinstance(record, dict) and isinstance(record.get("visible_inputs"), list):
    record = dict(record, visible_inputs=tuple(record["visible_inputs"]))
  task = _records.from_record(BugFixTask, record, where)
  for field in ("visible_tests", "hidden_tests"):
    try:
      sandbox.split_pinned_test(TEST_FILE, getattr(task, field))
    except ValueError as e:
      raise _records.TaskFileError(f"{where}: field {field!r}: {e}") from None
  return task
