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
"""

from rlagents.tools._arithmetic import evaluate_expression
from rlagents.tools._arithmetic import ExpressionError
from rlagents.tools._calculator import CalculatorTool
from rlagents.tools._jax_calculator import JaxCalculator
from rlagents.tools._jax_calculator import ToolOutput
from rlagents.tools._protocol import CallStatus
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
    "CalculatorTool",
    "CallStatus",
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
