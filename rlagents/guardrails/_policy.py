"""The allow-list policy and the review gate: which calls may run (host code).

    guard = Guard(AllowListPolicy({"calc": r"[0-9+*() -]{1,64}", "search": None}),
                  ReviewGate(approve=None))          # no reviewer: tagged calls are denied
    toolbox = tools.ToolBox([...], guard=guard)

A refused call never runs; the agent reads `error: denied: ...` as its observation, and the audit
trail records the decision.
"""

import dataclasses
import re
from typing import Callable, Iterable, Mapping

from rlagents import tools as tools_lib


@dataclasses.dataclass(frozen=True)
class Decision:
  """A guard's verdict on one call; `reason` is what the agent and the audit log see."""
  allowed: bool
  reason: str


class AllowListPolicy:
  """Allows only the listed tools, each optionally with a pattern its arguments must match.

  Args:
    rules: tool name -> regular expression the whole argument text must match (None: any).
  """

  def __init__(self, rules: Mapping[str, str | None]):
    self.rules = {name: (re.compile(p, re.DOTALL) if p is not None else None)
                  for name, p in rules.items()}

  def check_tools(self, known: Iterable[str]) -> None:
    """Raises `ValueError` naming an allow-listed tool that no toolbox provides."""
    unknown = sorted(set(self.rules) - set(known))
    if unknown:
      raise ValueError(f"allow-list names unknown tool(s) {unknown}; known tools: "
                       f"{sorted(known)}")

  def __call__(self, call: tools_lib.ToolCall) -> Decision:
    if call.name not in self.rules:
      return Decision(False, f"denied: {call.name} not allowed")
    pattern = self.rules[call.name]
    if pattern is not None and pattern.fullmatch(call.arguments) is None:
      return Decision(False, f"denied: {call.name} arguments not allowed")
    return Decision(True, "allowed")


Approver = Callable[[tools_lib.ToolCall, tools_lib.ToolSpec], bool]


@dataclasses.dataclass(frozen=True)
class ReviewGate:
  """Holds calls to tools with a gated cost tag until `approve` says yes.

  Attributes:
    approve: the reviewer, `approve(call, spec) -> bool`; None (the training default) denies
      every gated call, since nobody is there to review it.
    gated_costs: the cost tags that need review.
  """
  approve: Approver | None = None
  gated_costs: tuple[str, ...] = ("high", "irreversible")

  def __post_init__(self):
    unknown = set(self.gated_costs) - set(tools_lib.COST_TAGS)
    if unknown:
      raise ValueError(f"ReviewGate.gated_costs has unknown tags {sorted(unknown)}; "
                       f"valid: {tools_lib.COST_TAGS}")

  def __call__(self, call: tools_lib.ToolCall, spec: tools_lib.ToolSpec) -> Decision:
    if spec.cost not in self.gated_costs:
      return Decision(True, "allowed")
    if self.approve is None:
      return Decision(False, f"denied: {call.name} needs review")
    if self.approve(call, spec):
      return Decision(True, f"approved: {call.name} by reviewer")
    return Decision(False, f"denied: {call.name} rejected by reviewer")


class Guard:
  """The policy, then the review gate; plug into `tools.ToolBox(guard=...)`."""

  def __init__(self, policy: AllowListPolicy | None = None, gate: ReviewGate | None = None):
    self.policy = policy
    self.gate = gate if gate is not None else ReviewGate()

  def __call__(self, call: tools_lib.ToolCall, spec: tools_lib.ToolSpec) -> Decision:
    if self.policy is not None:
      decision = self.policy(call)
      if not decision.allowed:
        return decision
    return self.gate(call, spec)


def guarded_toolbox(tools: list, *, allow: Mapping[str, str | None] | None = None,
                    approve: Approver | None = None,
                    parser=tools_lib.parse_tool_call) -> tools_lib.ToolBox:
  """A toolbox with an allow-list (default: every given tool) and a review gate.

  Raises:
    ValueError: `allow` names a tool that is not among `tools`.
  """
  names = [t.spec.name for t in tools]
  policy = AllowListPolicy(allow if allow is not None else {n: None for n in names})
  policy.check_tools(names)
  return tools_lib.ToolBox(tools, parser=parser, guard=Guard(policy, ReviewGate(approve)))


def interactive_approver(ask: Callable[[str], str] = input) -> Approver:
  """A reviewer for `experiments/`: asks on the terminal; only `y`/`yes` approves."""

  def approve(call: tools_lib.ToolCall, spec: tools_lib.ToolSpec) -> bool:
    answer = ask(f"[review] {spec.name} ({spec.cost}) wants to run with {call.arguments!r}. "
                 "Approve? [y/N] ")
    return answer.strip().lower() in ("y", "yes")

  return approve
