"""JSON-style calls, argument schemas and the built-in search, Python and unit-test tools."""

import json

import numpy as np
import pytest

from rlagents import sandbox
from rlagents import tools

RNG = np.random.default_rng(0)
LIMITS = sandbox.SandboxLimits(cpu_seconds=1, wall_seconds=3, memory_bytes=128 * 2**20)
CORPUS = {"p1": "paris is the capital of france.", "p2": "berlin is in germany.",
          "p3": "the river seine flows through paris."}
TESTS = {"test_add.py": "from solution import add\n\ndef test_small():\n  assert add(2, 3) == 5\n"
                        "\ndef test_zero():\n  assert add(0, 0) == 0\n"}


def test_json_call_is_parsed_into_canonical_arguments():
  call = tools.parse_json_tool_call('{"name": "search", "arguments": {"query": "x", "a": 1}}')
  assert call == tools.ToolCall("search", '{"a": 1, "query": "x"}')


@pytest.mark.parametrize("text, message", [
    ('{"name": "search", "arguments": {"query": "x"}', "bad json at"),
    ("[1, 2]", "must be a json object"),
    ('{"arguments": {}}', "needs a string 'name'"),
    ('{"name": "search", "arguments": "x"}', "'arguments' must be a json object"),
    ('{"name": "search", "arguments": {}, "id": 3}', "unknown call keys"),
])
def test_malformed_json_calls_become_observations(text, message):
  box = tools.ToolBox([tools.DocumentSearchTool(CORPUS)], parser=tools.parse_json_tool_call)
  result = box.execute(text, RNG)
  assert result.status == tools.CallStatus.MALFORMED
  assert message in result.observation


def test_arguments_are_checked_against_the_schema():
  box = tools.ToolBox([tools.DocumentSearchTool(CORPUS)], parser=tools.parse_json_tool_call)
  for arguments, message in (({}, "needs 'query'"), ({"query": 3}, "must be string"),
                             ({"query": "x", "k": 1}, "unknown key 'k'"),
                             ({"query": "x" * 201}, "longer than 200")):
    result = box.execute(json.dumps({"name": "search", "arguments": arguments}), RNG)
    assert result.status == tools.CallStatus.INVALID_ARGUMENTS, arguments
    assert message in result.observation


def test_search_ranks_the_passage_that_shares_rare_words():
  search = tools.DocumentSearchTool(CORPUS, top_k=1)
  assert search.search("capital of france") == ["p1"]
  assert search("seine", RNG) == "[p3] the river seine flows through paris."
  assert search("tokyo", RNG) == "no results"


def test_python_runner_runs_in_the_sandbox_and_reports_violations():
  runner = tools.PythonRunnerTool(limits=LIMITS)
  assert runner(json.dumps({"code": "print(6 * 7)"}), RNG) == "exit 0\n42"
  observation = runner("import socket; socket.socket()", RNG)  # text-style argument
  assert observation.startswith("violation: network")


def test_unit_test_runner_passes_a_fix_fails_a_bug_and_flags_tampering():
  runner = tools.UnitTestRunnerTool(TESTS, limits=LIMITS)
  assert runner(json.dumps({"solution": "def add(a, b):\n  return a + b\n"}), RNG) == (
      "exit 0\npassed 2/2")
  failing = runner(json.dumps({"solution": "def add(a, b):\n  return a - b\n"}), RNG)
  assert "passed 1/2" in failing and "failed test_add.test_small" in failing
  tamper = "open('test_add.py', 'w').write('def test_small(): pass')\ndef add(a, b): return 0\n"
  observation = runner(json.dumps({"solution": tamper}), RNG)
  assert observation.startswith("violation: pinned_file")
  assert "<sandbox>" in observation  # no random directory name leaks into observations


def test_tool_spec_cost_tag_is_checked():
  with pytest.raises(ValueError, match="cost must be one of"):
    tools.ToolSpec(name="x", description="", parameters={}, cost="cheap")
