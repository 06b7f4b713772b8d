"""The JSON function-call style of chat templates, and JSON-schema checks of arguments.

    <tool_call>{"name": "search", "arguments": {"query": "capital of france"}}</tool_call>

`parse_json_tool_call` reads the text between the markers; the arguments travel to the tool as
canonical JSON text (sorted keys), so the same call always has the same `ToolCall`. Host code.
"""

import json
from typing import Any, Mapping

from rlagents.tools import _protocol

JSON_CALL_OPEN, JSON_CALL_CLOSE = "<tool_call>", "</tool_call>"

_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
          "object": dict, "array": list}


def parse_json_tool_call(text: str) -> _protocol.ToolCall:
  """Parses `{"name": ..., "arguments": {...}}`.

  Raises:
    MalformedToolCall: not JSON, not an object, or missing a string `name` or object
      `arguments`; the message says which.

  Args:
    text: the text between `<tool_call>` and `</tool_call>`.
  """
  try:
    value = json.loads(text)
  except json.JSONDecodeError as e:
    raise _protocol.MalformedToolCall(f"bad json at {e.pos}: {e.msg}") from e
  if not isinstance(value, dict):
    raise _protocol.MalformedToolCall("call must be a json object")
  if not isinstance(value.get("name"), str) or not value["name"]:
    raise _protocol.MalformedToolCall("call needs a string 'name'")
  arguments = value.get("arguments", {})
  if not isinstance(arguments, dict):
    raise _protocol.MalformedToolCall("'arguments' must be a json object")
  extra = set(value) - {"name", "arguments"}
  if extra:
    raise _protocol.MalformedToolCall(f"unknown call keys {sorted(extra)}")
  return _protocol.ToolCall(name=value["name"], arguments=json.dumps(arguments, sort_keys=True))


def validate_arguments(schema: Mapping[str, Any], value: Any, path: str = "arguments") -> None:
  """Checks `value` against a JSON schema (the subset tools use).

  Supported: `type`, `properties`, `required`, `additionalProperties: false`, `maxLength`,
  `minimum`, `maximum`, `enum`, `items`.

  Raises:
    ToolError: naming the first offending path.

  Args:
    schema: the JSON schema.
    value: the decoded arguments.
    path: names `value` in the error message.
  """
  expected = schema.get("type")
  if expected is not None:
    python_type = _TYPES.get(expected)
    if python_type is None:
      raise ValueError(f"schema type {expected!r} is not supported")
    if not isinstance(value, python_type) or (expected != "boolean" and isinstance(value, bool)):
      raise _protocol.ToolError(f"{path} must be {expected}")
  if "enum" in schema and value not in schema["enum"]:
    raise _protocol.ToolError(f"{path} must be one of {schema['enum']}")
  if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
    raise _protocol.ToolError(f"{path} is longer than {schema['maxLength']} chars")
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    if value < schema.get("minimum", value) or value > schema.get("maximum", value):
      raise _protocol.ToolError(f"{path} is out of range")
  if isinstance(value, dict):
    properties = schema.get("properties", {})
    for name in schema.get("required", ()):
      if name not in value:
        raise _protocol.ToolError(f"{path} needs '{name}'")
    for name, item in value.items():
      if name in properties:
        validate_arguments(properties[name], item, f"{path}.{name}")
      elif schema.get("additionalProperties", True) is False:
        raise _protocol.ToolError(f"{path} has unknown key '{name}'")
  if isinstance(value, list) and "items" in schema:
    for i, item in enumerate(value):
      validate_arguments(schema["items"], item, f"{path}[{i}]")


def decode_arguments(spec: _protocol.ToolSpec, arguments: str) -> dict[str, Any]:
  """The arguments of a call to a tool with an object schema, validated.

  JSON-style calls carry a JSON object. A `name(text)` call to a tool whose schema has exactly
  one required string property passes `text` as that property.

  Raises:
    ToolError: the arguments do not match `spec.parameters`.

  Args:
    spec: the tool's spec; `spec.parameters` is an object schema.
    arguments: the call's argument text (a JSON object, or plain text for a single string
      property).
  """
  schema = spec.parameters
  stripped = arguments.strip()
  if stripped.startswith("{"):
    try:
      value = json.loads(stripped)
    except json.JSONDecodeError as e:
      raise _protocol.ToolError(f"bad json arguments at {e.pos}") from e
  else:
    required = schema.get("required", ())
    if len(required) != 1 or schema["properties"][required[0]].get("type") != "string":
      raise _protocol.ToolError("arguments must be a json object")
    value = {required[0]: arguments}
  validate_arguments(schema, value)
  return value
