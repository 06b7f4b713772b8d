"""How a policy writes a tool call or an answer: the call syntaxes an episode can be played in.

An episode's actions are text; its `syntax` names how that text is read (`interpret`) and how a
demonstration is written in it (`write_call`, `write_answer`):

  'marker'       the project's own markers, `<call>calc(1+2)</call>` ... `<answer>3</answer>`
                 (a segment ends with its stop marker).
  'hermes'       chat-template models that wrap JSON in `<tool_call>` tags (Qwen2.5, Hermes):
                 `<tool_call>\n{"name": "calc", "arguments": {"input": "1+2"}}\n</tool_call>`;
                 an assistant turn without one is the final answer.
  'llama3_json'  Llama-3.1 style: the whole assistant turn is one JSON object
                 `{"name": "calc", "parameters": {"input": "1+2"}}`; any other turn answers.

For the chat syntaxes a segment is the content of one finished assistant turn (the turn-end
token already removed by the rollout). A JSON call is handed to the tools in their own
`name(arguments)` form (`tools.parse_tool_call`), so every suite's toolbox, guardrails, rewards
and replay work unchanged: a tool whose parameters are an object schema gets the arguments as
canonical JSON, any other tool gets the string `input` (its schema is presented to the model
wrapped as `{"input": ...}`, see `tool_schema`). A call that is not valid JSON is passed on as
written, so the tools report it as malformed like any other bad call. Host code.
"""

import dataclasses
import json
import re
from typing import Any, Mapping

from rlagents import tools as tools_lib

CALL_OPEN, CALL_CLOSE = "<call>", "</call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
# The argument name under which a tool whose schema is not an object takes its text.
INPUT_ARGUMENT = "input"


class CallSyntaxError(ValueError):
  """An unknown call syntax; the message names the known ones."""


@dataclasses.dataclass(frozen=True)
class Reading:
  """What one segment says.

  Attributes:
    kind: 'call', 'answer' or 'truncated' (the segment does neither).
    body: the call text in the tools' `name(arguments)` form, or the answer text.
  """
  kind: str
  body: str = ""


def tool_schema(spec: tools_lib.ToolSpec) -> dict[str, Any]:
  """The tool as a chat template lists it: `{"type": "function", "function": {...}}`.

  An object schema is given as it is; any other schema (a plain-text argument) becomes one
  required string-like property `input`.
  """
  parameters = dict(spec.parameters)
  if parameters.get("type") != "object":
    parameters = {"type": "object", "properties": {INPUT_ARGUMENT: parameters},
                  "required": [INPUT_ARGUMENT]}
  return {"type": "function",
          "function": {"name": spec.name, "description": spec.description,
                       "parameters": parameters}}


def json_arguments(spec: tools_lib.ToolSpec | None, arguments: str) -> dict[str, Any] | None:
  """The JSON arguments object of a call written `name(arguments)`, or None if it has none.

  The inverse of `call_text`: an object-schema tool's JSON text is decoded (or its single
  required string property filled with plain text); any other tool's text is `input`.
  """
  if spec is not None and spec.parameters.get("type") == "object":
    stripped = arguments.strip()
    if stripped.startswith("{"):
      try:
        value = json.loads(stripped)
      except json.JSONDecodeError:
        return None
      return value if isinstance(value, dict) else None
    required = spec.parameters.get("required", ())
    if len(required) != 1:
      return None
    return {required[0]: arguments}
  return {INPUT_ARGUMENT: arguments}


def call_text(name: Any, arguments: Any, toolbox: Any) -> str:
  """The tools' `name(arguments)` text of a JSON call (see the module docstring)."""
  name = name if isinstance(name, str) else json.dumps(name)
  spec = {s.name: s for s in toolbox.specs}.get(name)
  if not isinstance(arguments, dict):
    return f"{name}({json.dumps(arguments, sort_keys=True)})"
  if spec is not None and spec.parameters.get("type") == "object":
    return f"{name}({json.dumps(arguments, sort_keys=True)})"
  if set(arguments) == {INPUT_ARGUMENT} and isinstance(arguments[INPUT_ARGUMENT], str):
    return f"{name}({arguments[INPUT_ARGUMENT]})"
  return f"{name}({json.dumps(arguments, sort_keys=True)})"


class MarkerSyntax:
  """`<call>name(arguments)</call>` and `<answer>text</answer>`; see `episodes.advance`."""
  name = "marker"

  def interpret(self, segment: str, toolbox: Any) -> Reading:
    del toolbox
    if segment.endswith(ANSWER_CLOSE):
      return Reading("answer", segment[:-len(ANSWER_CLOSE)].rsplit(ANSWER_OPEN, 1)[-1])
    if segment.endswith(CALL_CLOSE):
      return Reading("call", segment[:-len(CALL_CLOSE)].rsplit(CALL_OPEN, 1)[-1])
    return Reading("truncated")

  def write_call(self, name: str, arguments: str, spec: tools_lib.ToolSpec | None) -> str:
    del spec
    return f"{CALL_OPEN}{name}({arguments}){CALL_CLOSE}"

  def write_malformed(self, body: str) -> str:
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"

  def write_answer(self, text: str) -> str:
    return f"{ANSWER_OPEN}{text}{ANSWER_CLOSE}"


class _JsonSyntax:
  """Shared by the JSON syntaxes: a call object with a name and an arguments object."""
  name: str
  arguments_key: str

  def _call_object(self, body: str) -> dict[str, Any] | None:
    try:
      value = json.loads(body)
    except json.JSONDecodeError:
      return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
      return None
    return value

  def _arguments(self, value: Mapping[str, Any]) -> Any:
    for key in (self.arguments_key, "arguments", "parameters"):
      if key in value:
        return value[key]
    return {}

  def _reading(self, body: str, toolbox: Any) -> Reading:
    value = self._call_object(body.strip())
    if value is None:
      return Reading("call", body.strip())  # malformed: the tools say so
    return Reading("call", call_text(value["name"], self._arguments(value), toolbox))

  def _json(self, name: str, arguments: str, spec: tools_lib.ToolSpec | None) -> str:
    value = json_arguments(spec, arguments)
    if value is None:
      value = {INPUT_ARGUMENT: arguments}
    return json.dumps({"name": name, self.arguments_key: value})

  def _broken_json(self, body: str) -> str:
    """A call whose marker text did not parse, as JSON cut short by its last brace (so it
    does not parse either): the name is the body's leading identifier, the rest its input."""
    name = re.match(r"[a-z_][a-z0-9_]*", body)
    name = name.group(0) if name else ""
    return json.dumps({"name": name, self.arguments_key: {INPUT_ARGUMENT: body[len(name):]}})[:-1]

  def write_answer(self, text: str) -> str:
    return text

  def message(self, segment: str) -> dict[str, Any]:
    """The assistant message of a finished turn: with `tool_calls` when it holds a call whose
    JSON parses, else the text as `content` (an answer, or a malformed call as written)."""
    body = self._call_body(segment)
    value = self._call_object(body.strip()) if body is not None else None
    if value is None:
      return {"role": "assistant", "content": segment}
    return {"role": "assistant", "content": self._content_beside_call(segment),
            "tool_calls": [{"type": "function", "function": {
                "name": value["name"], "arguments": self._arguments(value)}}]}


class HermesSyntax(_JsonSyntax):
  """JSON calls in `<tool_call>` tags (Qwen2.5 and Hermes templates); one call per turn is run
  (the first)."""
  name = "hermes"
  arguments_key = "arguments"
  OPEN, CLOSE = tools_lib.JSON_CALL_OPEN, tools_lib.JSON_CALL_CLOSE

  def _call_body(self, segment: str) -> str | None:
    if self.OPEN not in segment:
      return None
    return segment.split(self.OPEN, 1)[1].split(self.CLOSE, 1)[0]

  def _content_beside_call(self, segment: str) -> str:
    return segment.split(self.OPEN, 1)[0].strip()

  def interpret(self, segment: str, toolbox: Any) -> Reading:
    body = self._call_body(segment)
    if body is None:
      return Reading("answer", segment.strip())
    return self._reading(body, toolbox)

  def write_call(self, name: str, arguments: str, spec: tools_lib.ToolSpec | None) -> str:
    return f"{self.OPEN}\n{self._json(name, arguments, spec)}\n{self.CLOSE}"

  def write_malformed(self, body: str) -> str:
    return f"{self.OPEN}\n{self._broken_json(body)}\n{self.CLOSE}"


class Llama3JsonSyntax(_JsonSyntax):
  """Llama-3.1 JSON tool calls: a turn that is one JSON object `{"name", "parameters"}` calls,
  any other turn answers."""
  name = "llama3_json"
  arguments_key = "parameters"

  def _call_body(self, segment: str) -> str | None:
    return segment if segment.strip().startswith("{") else None

  def _content_beside_call(self, segment: str) -> str:
    del segment
    return ""

  def interpret(self, segment: str, toolbox: Any) -> Reading:
    if self._call_body(segment) is None:
      return Reading("answer", segment.strip())
    return self._reading(segment, toolbox)

  def write_call(self, name: str, arguments: str, spec: tools_lib.ToolSpec | None) -> str:
    return self._json(name, arguments, spec)

  def write_malformed(self, body: str) -> str:
    return self._broken_json(body)


SYNTAXES = {s.name: s for s in (MarkerSyntax(), HermesSyntax(), Llama3JsonSyntax())}
CHAT_SYNTAXES = ("hermes", "llama3_json")


def call_syntax(name: str, *, field: str = "syntax") -> Any:
  """The registered syntax called `name`.

  Raises:
    CallSyntaxError: an unknown name; the message names `field` and the known syntaxes.
  """
  if name not in SYNTAXES:
    raise CallSyntaxError(f"{field}: tool-call syntax {name!r} is not known to the parser (known: "
                       f"{', '.join(SYNTAXES)})")
  return SYNTAXES[name]


def rewrite_segment(segment: str, result: Any, syntax: Any, toolbox: Any) -> str:
  """A marker-syntax segment as `syntax` writes it (same call, same answer).

  Demonstrations are played in the marker syntax by the suites' experts; this turns each of
  their segments into the model's own syntax. A call the tools could not parse stays
  malformed (its JSON is cut short), so it fails in the same way.
  """
  reading = SYNTAXES["marker"].interpret(segment, toolbox)
  if reading.kind == "answer":
    return syntax.write_answer(reading.body)
  if reading.kind == "call":  # a call that ran, or one past the episode's limit (truncated)
    call = result.call if result is not None else None
    if call is None:
      try:
        call = tools_lib.parse_tool_call(reading.body)
      except tools_lib.MalformedToolCall:
        return syntax.write_malformed(reading.body)
    spec = {s.name: s for s in toolbox.specs}.get(call.name)
    return syntax.write_call(call.name, call.arguments, spec)
  return segment
