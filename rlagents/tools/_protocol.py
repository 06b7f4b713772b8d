"""The tool protocol, the call parser and the registry that executes calls (host code)."""

import dataclasses
import enum
import re
from typing import Any, Callable, Mapping, Protocol

import numpy as np

_CALL_PATTERN = re.compile(r"([a-z_][a-z0-9_]*)\((.*)\)", re.DOTALL)


class CallStatus(str, enum.Enum):
  """What became of one tool call."""
  OK = "ok"
  MALFORMED = "malformed"                  # not `name(arguments)`
  UNKNOWN_TOOL = "unknown_tool"            # no tool of that name is registered
  INVALID_ARGUMENTS = "invalid_arguments"  # the tool rejected its arguments
  TRANSIENT_ERROR = "transient_error"      # a valid call that failed this time; retrying helps
  DENIED = "denied"                        # the guardrails refused it (allow-list, review gate)


class ToolError(Exception):
  """A tool rejected its arguments; the message is shown to the agent."""


class TransientToolError(ToolError):
  """A valid call that failed this time (busy, timed out); the same call may succeed later."""


class MalformedToolCall(ValueError):
  """The text between `<call>` and `</call>` is not `name(arguments)`."""


@dataclasses.dataclass(frozen=True)
class ToolSpec:
  """What the agent and the guardrails know about a tool.

  Attributes:
    name: the name the agent writes in a call.
    description: one line for prompts and docs.
    parameters: JSON schema of the arguments.
    cost: a cost or risk tag, one of `COST_TAGS`; the review gate holds tagged calls.
  """
  name: str
  description: str
  parameters: Mapping[str, Any]
  cost: str = "low"

  def __post_init__(self):
    if self.cost not in COST_TAGS:
      raise ValueError(f"ToolSpec {self.name!r}: cost must be one of {COST_TAGS}, got "
                       f"{self.cost!r}")


COST_TAGS = ("low", "medium", "high", "irreversible")


class Tool(Protocol):
  """A callable tool: `tool(arguments, rng) -> output text`, raising `ToolError` on bad input."""
  spec: ToolSpec

  def __call__(self, arguments: str, rng: np.random.Generator) -> str:
    ...


@dataclasses.dataclass(frozen=True)
class ToolCall:
  """A parsed call.

  Attributes:
    name: the tool's name.
    arguments: the argument text between the parentheses (or the JSON `arguments`).
  """
  name: str
  arguments: str


@dataclasses.dataclass(frozen=True)
class ToolResult:
  """The outcome of one call: its status and the observation text the agent reads.

  Attributes:
    call: the parsed call; None when the call text did not parse.
    status: what happened (OK, MALFORMED, UNKNOWN_TOOL, INVALID_ARGUMENTS, TRANSIENT_ERROR, DENIED).
    observation: the text appended between `<obs>` and `</obs>`; errors start with `error:`.
    guardrail: the guardrail's decision ('allowed', or the reason for a refusal).
  """
  call: ToolCall | None
  status: CallStatus
  observation: str
  guardrail: str = "allowed"  # the guardrail decision: "allowed", "approved: ..." or "denied: ..."

  @property
  def valid(self) -> bool:
    """A well-formed call to a known tool with accepted arguments (transient failures included)."""
    return self.status in (CallStatus.OK, CallStatus.TRANSIENT_ERROR)


def parse_tool_call(text: str) -> ToolCall:
  """Parses `name(arguments)`, the text between `<call>` and `</call>`.

  Raises:
    MalformedToolCall: when the text is not of that form.

  Args:
    text: e.g. 'calc(347*29+5)'.
  """
  match = _CALL_PATTERN.fullmatch(text.strip())
  if match is None:
    raise MalformedToolCall("bad call, use name(args)")
  return ToolCall(name=match.group(1), arguments=match.group(2))


class Decision(Protocol):
  """What a guard says about one call (see `rlagents.guardrails`)."""
  allowed: bool
  reason: str


class ToolBox:
  """A registry of tools that turns call text into an observation and never raises.

  Args:
    tools: the registered tools.
    parser: turns the text between the call markers into a `ToolCall` (`parse_tool_call` for
      `name(args)`, `parse_json_tool_call` for the JSON style of chat templates).
    guard: `guard(call, spec) -> Decision`, asked before every call of a known tool; a refusal
      becomes a `DENIED` observation.
  """

  def __init__(self, tools: "list[Tool] | tuple[Tool, ...]", *,
               parser: Callable[[str], ToolCall] = parse_tool_call,
               guard: "Callable[[ToolCall, ToolSpec], Decision] | None" = None):
    self.parser = parser
    self.guard = guard
    self._tools: dict[str, Tool] = {}
    for tool in tools:
      if tool.spec.name in self._tools:
        raise ValueError(f"tool {tool.spec.name!r} is registered twice")
      self._tools[tool.spec.name] = tool

  @property
  def specs(self) -> tuple[ToolSpec, ...]:
    return tuple(tool.spec for tool in self._tools.values())

  def execute(self, call_text: str, rng: np.random.Generator) -> ToolResult:
    """Parses and runs one call; every failure becomes an `error: ...` observation.

    Args:
      call_text: the text between `<call>` and `</call>`.
      rng: host generator for the tool's own randomness (busy failures).
    """
    try:
      call = self.parser(call_text)
    except MalformedToolCall as e:
      return ToolResult(None, CallStatus.MALFORMED, f"error: {e}")
    tool = self._tools.get(call.name)
    if tool is None:
      return ToolResult(call, CallStatus.UNKNOWN_TOOL, f"error: no tool {call.name[:12]}")
    decision = "allowed"
    if self.guard is not None:
      verdict = self.guard(call, tool.spec)
      decision = verdict.reason
      if not verdict.allowed:
        return ToolResult(call, CallStatus.DENIED, f"error: {verdict.reason}", decision)
    try:
      output = tool(call.arguments, rng)
    except TransientToolError as e:
      return ToolResult(call, CallStatus.TRANSIENT_ERROR, f"error: {e}", decision)
    except (ToolError, ValueError) as e:
      return ToolResult(call, CallStatus.INVALID_ARGUMENTS, f"error: {e}", decision)
    return ToolResult(call, CallStatus.OK, output, decision)

  def __contains__(self, name: str) -> bool:
    return name in self._tools

  def spec(self, name: str) -> ToolSpec:
    """The spec of the tool called `name`.

    Args:
      name: a registered tool's name.
    """
    return self._tools[name].spec
