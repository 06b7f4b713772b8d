"""The allow-list and the review gate: refused calls never run and become observations."""

import numpy as np
import pytest

from rlagents import guardrails
from rlagents import tools

RNG = np.random.default_rng(0)


class _Recorder:
  """A high-cost tool that records whether it ran."""

  def __init__(self, cost="high"):
    self.ran = []
    self.spec = tools.ToolSpec(name="deploy", description="", parameters={"type": "string"},
                               cost=cost)

  def __call__(self, arguments, rng):
    self.ran.append(arguments)
    return "deployed"


def test_a_tool_not_on_the_allow_list_is_denied_and_never_runs():
  deploy = _Recorder(cost="low")
  box = tools.ToolBox([tools.CalculatorTool(), deploy],
                      guard=guardrails.Guard(guardrails.AllowListPolicy({"calc": None})))
  result = box.execute("deploy(prod)", RNG)
  assert result.status == tools.CallStatus.DENIED
  assert result.observation == "error: denied: deploy not allowed"
  assert result.guardrail == "denied: deploy not allowed"
  assert not deploy.ran
  assert box.execute("calc(2+2)", RNG).observation == "4"


def test_argument_patterns_are_enforced():
  box = guardrails.guarded_toolbox([tools.CalculatorTool()], allow={"calc": r"[0-9+]{1,8}"})
  assert box.execute("calc(1+2)", RNG).observation == "3"
  result = box.execute("calc(9*9)", RNG)
  assert result.status == tools.CallStatus.DENIED
  assert "arguments not allowed" in result.observation


def test_review_gated_action_is_denied_without_a_reviewer():
  deploy = _Recorder()
  box = guardrails.guarded_toolbox([deploy])
  result = box.execute("deploy(prod)", RNG)
  assert result.status == tools.CallStatus.DENIED
  assert result.observation == "error: denied: deploy needs review"
  assert not deploy.ran


def test_the_built_in_code_runner_is_held_by_the_review_gate():
  """Arbitrary code is tagged high-cost: denied with no reviewer (training), run when approved."""
  assert tools.PythonRunnerTool().spec.cost == "high"
  call = 'python({"code": "print(6 * 7)"})'
  denied = guardrails.guarded_toolbox([tools.PythonRunnerTool()]).execute(call, RNG)
  assert denied.status == tools.CallStatus.DENIED
  assert denied.observation == "error: denied: python needs review"
  approved = guardrails.guarded_toolbox([tools.PythonRunnerTool()],
                                        approve=lambda call, spec: True).execute(call, RNG)
  assert approved.status == tools.CallStatus.OK and "42" in approved.observation


@pytest.mark.parametrize("reply, runs", [("y", True), ("yes", True), ("n", False), ("", False)])
def test_the_interactive_reviewer_approves_only_yes(reply, runs):
  deploy = _Recorder()
  asked = []
  approver = guardrails.interactive_approver(ask=lambda q: asked.append(q) or reply)
  box = guardrails.guarded_toolbox([deploy], approve=approver)
  result = box.execute("deploy(prod)", RNG)
  assert bool(deploy.ran) == runs
  assert "deploy (high)" in asked[0]
  assert result.guardrail == ("approved: deploy by reviewer" if runs
                              else "denied: deploy rejected by reviewer")


def test_an_unknown_tool_in_the_allow_list_is_a_clear_error():
  with pytest.raises(ValueError, match=r"unknown tool\(s\) \['serach'\]"):
    guardrails.guarded_toolbox([tools.CalculatorTool()], allow={"calc": None, "serach": None})


def test_an_unknown_cost_tag_in_the_gate_is_an_error():
  with pytest.raises(ValueError, match="unknown tags"):
    guardrails.ReviewGate(gated_costs=("expensive",))
