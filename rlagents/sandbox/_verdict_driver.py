"""Runs pinned tests inside the sandbox and reports each test's plain value (standard library only).

The host copies this file in as `main.py`, unchanged (so a `SandboxPool` runs it from a code
object compiled once), and writes two lines on its standard input: a nonce, then the tests to
call (`module:test,test;module:test`). It never judges: it imports each pinned test module
(whose tests `return` the values their asserts compared), calls every test the host named, and
writes one JSON record per test on the result channel, a file descriptor the host opened
outside the run's directory. Each record carries the nonce, read before the code under test is
imported, so a record the code writes itself is told apart unless it digs the nonce out of this
interpreter's memory:

    {"test": "test_solution.test_case_0", "value": ["int", "5"]}       (ints in hex)
    {"test": "...", "raised": "ZeroDivisionError", "base": false}
    {"test": "...", "opaque": "Always"}          (a value that is not a plain builtin)
    {"patched": ["builtins.AssertionError"]}     (the runtime was changed under the tests)
    {"end": true}

Values are encoded by exact type (`type(x) is int`, never `isinstance`), so an object with a
custom `__eq__` or `__hash__`, or a subclass of a builtin, is reported as opaque, never as a
value. The host decodes the records into builtins of its own and compares them with the
expected values, which never enter the sandbox. Code under test can corrupt or fake these
records (it runs in this interpreter), but it cannot learn the expected values from them, so a
faked record passes only by being right, and a missing one fails.
(The records above are shown without their `"nonce"` field.)

`decode` is the host's half of the encoding, kept here so the format has one definition. The
driver imports nothing beyond what the interpreter has already loaded (its JSON is written by
`to_json`, not the `json` module), so judging adds little to the cost of a run.
"""

import builtins
import os
import sys

MAX_DEPTH = 32
MAX_RECORD_CHARS = 16384
# Test frameworks and the like: if the code under test loads one, none of their functions may
# be code of the run's own files (a patched `unittest.TestCase.assertEqual`).
WATCHED_PACKAGES = ("unittest", "json", "doctest", "pytest", "_pytest")
_ESCAPES = {**{i: f"\\u{i:04x}" for i in range(32)}, ord('"'): '\\"', ord("\\"): "\\\\"}


def to_json(value):
  """JSON text of str, bool, None, list and dict-with-str-keys values (what a record holds)."""
  kind = type(value)
  if kind is str:
    return '"' + str.translate(value, _ESCAPES) + '"'
  if value is None:
    return "null"
  if kind is bool:
    return "true" if value else "false"
  if kind is list:
    return "[" + ", ".join(to_json(v) for v in value) + "]"
  if kind is dict:
    return "{" + ", ".join(to_json(str(k)) + ": " + to_json(v) for k, v in value.items()) + "}"
  return to_json(str(value))


def encode(value, depth=0):
  """A tagged JSON form of a plain builtin value; TypeError for anything else."""
  kind = type(value)
  if depth > MAX_DEPTH:
    raise TypeError("nested too deeply")
  if value is None:
    return ["none"]
  if kind is bool:
    return ["bool", bool.__bool__(value)]
  if kind is int:
    return ["int", int.__format__(value, "x")]  # Hex: no limit on the number of digits.
  if kind is float:
    return ["float", float.__repr__(value)]
  if kind is str:
    return ["str", str.__str__(value)]
  if kind is bytes:
    return ["bytes", bytes.hex(value)]
  if kind in (list, tuple, set, frozenset):
    items = list.__iter__(value) if kind is list else iter(kind.__iter__(value))
    return [kind.__name__, [encode(item, depth + 1) for item in items]]
  if kind is dict:
    return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)]
                     for k, v in dict.items(value)]]
  raise TypeError(kind.__name__)


def decode(tagged, depth=0):
  """The builtin value of an `encode`d form; ValueError for a malformed one (host side)."""
  if depth > MAX_DEPTH or not isinstance(tagged, list) or not tagged:
    raise ValueError("malformed value")
  tag, rest = tagged[0], tagged[1:]
  if tag == "none" and not rest:
    return None
  if len(rest) != 1:
    raise ValueError("malformed value")
  body = rest[0]
  if tag == "bool" and isinstance(body, bool):
    return body
  if tag in ("int", "float", "str", "bytes") and isinstance(body, str):
    try:
      return {"int": lambda t: int(t, 16), "float": float, "str": str,
              "bytes": bytes.fromhex}[tag](body)
    except ValueError as e:
      raise ValueError(f"malformed {tag}") from e
  if tag in ("list", "tuple", "set", "frozenset") and isinstance(body, list):
    items = [decode(item, depth + 1) for item in body]
    try:
      return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    except TypeError as e:
      raise ValueError("unhashable set item") from e
  if tag == "dict" and isinstance(body, list):
    try:
      return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
    except (TypeError, ValueError) as e:
      raise ValueError("malformed dict") from e
  raise ValueError(f"malformed value tagged {str(tag)[:20]!r}")


def _watched():
  """(name -> object) of what the tests' outcome could be steered through."""
  watched = {f"builtins.{k}": v for k, v in vars(builtins).items() if k != "_"}
  watched.update({f"sys.modules[{k!r}]": sys.modules.get(k) for k in ("builtins", "sys")})
  watched.update({f"sys.{k}": getattr(sys, k) for k in ("exit", "excepthook", "flags")})
  watched.update({"sys.gettrace()": sys.gettrace(), "sys.getprofile()": sys.getprofile()})
  return watched


def _foreign_code(run_dir):
  """Names in the watched packages (where loaded) bound to functions of the run's own code."""
  own = {name for name, module in list(sys.modules.items())
         if (getattr(module, "__file__", None) or "").startswith(run_dir)}
  foreign = []
  for name, module in list(sys.modules.items()):
    if name.split(".")[0] not in WATCHED_PACKAGES or module is None:
      continue
    spaces = [(name, vars(module))] + [
        (f"{name}.{k}", vars(v)) for k, v in vars(module).items()
        if isinstance(v, type) and getattr(v, "__module__", "") == name]
    for where, namespace in spaces:
      for key, value in list(namespace.items()):
        function = getattr(value, "__func__", value)
        code = getattr(function, "__code__", None)
        if code is not None and (code.co_filename.startswith(run_dir)
                                 or getattr(function, "__module__", None) in own):
          foreign.append(f"{where}.{key}")
  return foreign


def _main():
  channel = int(os.environ.pop("SANDBOX_CHANNEL_FD"))
  nonce = sys.stdin.readline().strip()
  plan = [part.split(":", 1) for part in sys.stdin.readline().strip().split(";") if part]
  import_ = builtins.__import__
  write, dumps = os.write, to_json
  baseline = _watched()
  run_dir = os.getcwd() + os.sep

  def emit(record):
    record["nonce"] = nonce
    text = dumps(record)
    if len(text) > MAX_RECORD_CHARS:
      text = dumps({"test": record.get("test"), "raised": "value too large", "base": False,
                    "nonce": nonce})
    write(channel, (text + "\n").encode(errors="replace"))

  def check_runtime(module=None, tests=None):
    now = _watched()
    changed = sorted(k for k in set(baseline) | set(now)
                     if baseline.get(k, baseline) is not now.get(k, now))
    changed += _foreign_code(run_dir)
    for name, (function, code) in (tests or {}).items():
      # The tests are called as they were defined; a swapped one or its code is a patch.
      if getattr(module, name, None) is not function or function.__code__ is not code:
        changed.append(f"{module.__name__}.{name}")
    if changed:
      emit({"patched": changed[:8]})

  for module_name, names in plan:
    names = names.split(",")
    try:
      module = import_(module_name)  # a top-level module: `test_<name>`
    except BaseException as e:  # pylint: disable=broad-except
      for name in names:
        emit({"test": f"{module_name}.{name}", "raised": type(e).__name__,
              "base": not isinstance(e, Exception)})
      check_runtime()
      continue
    tests = {}
    for name in names:
      function = getattr(module, name, None)
      tests[name] = (function, getattr(function, "__code__", None))
    for name in names:
      test = f"{module_name}.{name}"
      try:
        value = tests[name][0]()
      except BaseException as e:  # pylint: disable=broad-except
        emit({"test": test, "raised": type(e).__name__, "base": not isinstance(e, Exception)})
      else:
        try:
          emit({"test": test, "value": encode(value)})
        except (TypeError, RecursionError) as e:
          emit({"test": test, "opaque": str(e)[:80]})
      check_runtime(module, tests)
  emit({"end": True})


if __name__ == "__main__":
  _main()
