"""Tool calls: every failure becomes an observation, never an exception."""

import numpy as np
import pytest

from rlagents import tools


@pytest.fixture
def toolbox():
  return tools.ToolBox([tools.CalculatorTool(failure_rate=0.0)])


@pytest.mark.parametrize("call_text, status, observation", [
    ("calc(2+3*4)", tools.CallStatus.OK, "14"),
    ("calc( 7 - 10 )", tools.CallStatus.OK, "-3"),
    ("calc(2+3*4", tools.CallStatus.MALFORMED, "error: bad call, use name(args)"),
    ("2+3*4", tools.CallStatus.MALFORMED, "error: bad call, use name(args)"),
    ("", tools.CallStatus.MALFORMED, "error: bad call, use name(args)"),
    ("search(cats)", tools.CallStatus.UNKNOWN_TOOL, "error: no tool search"),
    ("calc(2+)", tools.CallStatus.INVALID_ARGUMENTS, "error: dangling operator '+' at 1"),
    ("calc(2/3)", tools.CallStatus.INVALID_ARGUMENTS, "error: unknown character at 1"),
    ("calc()", tools.CallStatus.INVALID_ARGUMENTS, "error: empty expression"),
])
def test_execute_turns_every_outcome_into_an_observation(toolbox, call_text, status,
                                                         observation):
  result = toolbox.execute(call_text, np.random.default_rng(0))
  assert result.status == status
  assert result.observation == observation
  assert result.valid == (status == tools.CallStatus.OK)


def test_transient_failures_happen_at_the_configured_rate_and_retry_succeeds():
  toolbox = tools.ToolBox([tools.CalculatorTool(failure_rate=0.3)])
  rng = np.random.default_rng(1)
  results = [toolbox.execute("calc(6*7)", rng) for _ in range(4000)]
  busy = [r for r in results if r.status == tools.CallStatus.TRANSIENT_ERROR]
  assert abs(len(busy) / len(results) - 0.3) < 0.03
  assert all(r.observation == "error: busy, retry" and r.valid for r in busy)
  assert {r.observation for r in results if r.status == tools.CallStatus.OK} == {"42"}


def test_bad_arguments_are_reported_even_when_the_tool_would_be_busy():
  toolbox = tools.ToolBox([tools.CalculatorTool(failure_rate=0.99)])
  result = toolbox.execute("calc(1+*2)", np.random.default_rng(0))
  assert result.status == tools.CallStatus.INVALID_ARGUMENTS


def test_parse_tool_call():
  assert tools.parse_tool_call("calc(1+2)") == tools.ToolCall("calc", "1+2")
  assert tools.parse_tool_call(" calc((1+2)*3) ") == tools.ToolCall("calc", "(1+2)*3")
  with pytest.raises(tools.MalformedToolCall):
    tools.parse_tool_call("Calc(1)")


def test_toolbox_rejects_duplicate_names_and_bad_failure_rate():
  with pytest.raises(ValueError, match="registered twice"):
    tools.ToolBox([tools.CalculatorTool(), tools.CalculatorTool()])
  with pytest.raises(ValueError, match="failure_rate"):
    tools.CalculatorTool(failure_rate=1.0)
