"""Tools the agent calls, their registry and the parser for calls in model output (host code).

The text format of a tool-use episode (one character per token, special tokens in angle brackets):

    <bos>{question}<call>{tool}({arguments})</call><obs>{observation}</obs> ... <answer>{answer}</answer>

The model writes everything after the question except the observations: a call is a tool name,
then its arguments inside one pair of parentheses, between `<call>` and `</call>`; the rollout
runs the tool and appends its result between `<obs>` and `</obs>`. Errors (a malformed call, an
unknown tool, bad arguments, a tool that is busy) come back as an observation that starts with
`error:`, so the agent can read them and try again. The episode ends at `</answer>`.

Example:

    <bos>347*29+5=?<call>calc(347*29+5)</call><obs>error: busy, retry</obs>
    <call>calc(347*29+5)</call><obs>10068</obs><answer>10068</answer>

Chat-template models write JSON calls instead, `<tool_call>{"name": ..., "arguments": {...}}
</tool_call>`; `ToolBox(..., parser=parse_json_tool_call)` reads them. Tools with an object
schema validate their arguments against it (`decode_arguments`). A guard (`rlagents.guardrails`)
may refuse a call; the refusal is a `denied` observation like any other error.
"""

from rlagents.tools._code_edit import apply_edit
from rlagents.tools._code_edit import CodeWorkspace
from rlagents.tools._code_edit import default_runner
from rlagents.tools._code_edit import describe_tests
from rlagents.tools._code_edit import EDIT_TOOLS
from rlagents.tools._code_edit import edit_line
from rlagents.tools._code_edit import edited_source
from rlagents.tools._code_edit import number_lines
from rlagents.tools._code_edit import parse_edit
from rlagents.tools._code_edit import parse_replace
from rlagents.tools._code_edit import replace_line
from rlagents.tools._builtins import describe_run
from rlagents.tools._builtins import DocumentSearchTool
from rlagents.tools._builtins import PythonRunnerTool
from rlagents.tools._builtins import run_pinned_tests
from rlagents.tools._builtins import UnitTestRunnerTool
from rlagents.tools._builtins import words
from rlagents.tools._json_calls import decode_arguments
from rlagents.tools._json_calls import JSON_CALL_CLOSE
from rlagents.tools._json_calls import JSON_CALL_OPEN
from rlagents.tools._json_calls import parse_json_tool_call
from rlagents.tools._json_calls import validate_arguments
from rlagents.tools._arithmetic import evaluate_expression
from rlagents.tools._arithmetic import ExpressionError
from rlagents.tools._calculator import CalculatorTool
from rlagents.tools._jax_calculator import CALL_STATUSES
from rlagents.tools._jax_calculator import CharClass
from rlagents.tools._jax_calculator import JaxCalculator
from rlagents.tools._jax_calculator import ToolOutput
from rlagents.tools._protocol import CallStatus
from rlagents.tools._protocol import COST_TAGS
from rlagents.tools._protocol import Decision
from rlagents.tools._protocol import MalformedToolCall
from rlagents.tools._protocol import parse_tool_call
from rlagents.tools._protocol import Tool
from rlagents.tools._protocol import ToolBox
from rlagents.tools._protocol import ToolCall
from rlagents.tools._protocol import ToolError
from rlagents.tools._protocol import ToolResult
from rlagents.tools._protocol import ToolSpec
from rlagents.tools._protocol import TransientToolError

__all__ = [
    "CALL_STATUSES",
    "COST_TAGS",
    "CharClass",
    "apply_edit",
    "CodeWorkspace",
    "default_runner",
    "describe_tests",
    "EDIT_TOOLS",
    "edit_line",
    "edited_source",
    "number_lines",
    "parse_edit",
    "parse_replace",
    "replace_line",
    "CalculatorTool",
    "CallStatus",
    "Decision",
    "DocumentSearchTool",
    "JSON_CALL_CLOSE",
    "JSON_CALL_OPEN",
    "PythonRunnerTool",
    "UnitTestRunnerTool",
    "decode_arguments",
    "describe_run",
    "parse_json_tool_call",
    "run_pinned_tests",
    "validate_arguments",
    "words",
    "ExpressionError",
    "JaxCalculator",
    "MalformedToolCall",
    "Tool",
    "ToolBox",
    "ToolCall",
    "ToolError",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "TransientToolError",
    "evaluate_expression",
    "parse_tool_call",
]
