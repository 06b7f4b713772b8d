"""The calculator tool: exact integer arithmetic that is sometimes busy."""

import numpy as np

from rlagents.tools import _arithmetic
from rlagents.tools import _protocol


class CalculatorTool:
  """Evaluates `+ - *` expressions over integers; fails transiently on a fraction of calls.

  The transient failures make retrying a skill worth learning: a call that fails with
  `error: busy, retry` succeeds with probability `1 - failure_rate` when made again.

  Args:
    failure_rate: probability in [0, 1) that a call fails with `error: busy, retry`.
    name: the name the agent writes in a call.
  """

  def __init__(self, *, failure_rate: float = 0.0, name: str = "calc"):
    if not 0.0 <= failure_rate < 1.0:
      raise ValueError(f"failure_rate must be in [0, 1), got {failure_rate}")
    self.failure_rate = failure_rate
    self.spec = _protocol.ToolSpec(
        name=name,
        description="Evaluates an integer expression with + - * and parentheses.",
        parameters={"type": "string", "description": "the expression, e.g. 12*(3+4)"},
        cost="low",
    )

  def __call__(self, arguments: str, rng: np.random.Generator) -> str:
    # Arguments are checked before the transient failure is drawn, so a bad call is always
    # reported as bad and a retry of a valid call always has the same chance to succeed.
    try:
      value = _arithmetic.evaluate_expression(arguments)
    except _arithmetic.ExpressionError as e:
      raise _protocol.ToolError(str(e)) from e
    if self.failure_rate and rng.random() < self.failure_rate:
      raise _protocol.TransientToolError("busy, retry")
    return str(value)
