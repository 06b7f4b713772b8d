"""PythonRunnerTool's `files` are pinned, as its docstring says: readable, and never changed."""

import json

import numpy as np
import pytest

from rlagents import sandbox
from rlagents import tools

RNG = np.random.default_rng(0)
LIMITS = sandbox.SandboxLimits(cpu_seconds=1, wall_seconds=3, memory_bytes=128 * 2**20)


def test_the_files_can_be_read():
  runner = tools.PythonRunnerTool(limits=LIMITS, files={"data/table.csv": "a,b\n1,2\n"})
  assert runner(json.dumps({"code": "print(open('data/table.csv').read())"}), RNG) == (
      "exit 0\na,b\n1,2")


@pytest.mark.parametrize("attack", [
    "open('data/table.csv', 'w').write('x')",
    "import os\nos.remove('data/table.csv')",
    # Past the audit hook: only the kernel's read-only mount refuses these.
    "import _posixsubprocess, os\nr, w = os.pipe()\n"
    "args = (['/bin/sh', '-c', 'echo x > data/table.csv; rm -f data/table.csv'], [b'/bin/sh'],"
    " True, (), None, None, -1, -1, -1, -1, -1, -1, r, w, False, False)\n"
    "for tail in ((-1, None, None, None, -1, None, False), (-1, None, None, None, -1, None)):\n"
    "  try:\n    pid = _posixsubprocess.fork_exec(*args, *tail)\n    break\n"
    "  except TypeError:\n    pass\n"
    "os.waitpid(pid, 0)\nprint(open('data/table.csv').read())",
])
def test_the_files_cannot_be_changed(attack):
  runner = tools.PythonRunnerTool(limits=LIMITS, files={"data/table.csv": "a,b\n1,2\n"})
  observation = runner(json.dumps({"code": attack}), RNG)
  result = runner.last_result
  if "fork_exec" in attack:
    assert "a,b" in result.stdout, observation  # the file is intact after the shell's attempts
  else:
    assert observation.startswith("violation: pinned_file"), observation
  assert "data/table.csv" not in result.files  # pinned, so never returned as a changed file
