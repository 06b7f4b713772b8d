"""Tests for the safe arithmetic evaluator."""

import re

import numpy as np
import pytest

from rlagents.tools import _arithmetic
from rlagents.tools._arithmetic import evaluate_expression
from rlagents.tools._arithmetic import ExpressionError


@pytest.mark.parametrize("expression, value", [
    ("2+3*4", 14),            # 2 + 12
    ("(2+3)*4", 20),          # 5 * 4
    ("-3*2", -6),             # (-3) * 2
    ("10-2-3", 5),            # (10 - 2) - 3: left-associative
    ("2-3*4+5", -5),          # 2 - 12 + 5
    ("2*3*4-1", 23),          # 24 - 1
    ("2*-3", -6),             # unary minus after an operator
    ("--4", 4),               # -(-4)
    ("-(2+3)*2", -10),        # (-5) * 2
    ("1 + 2 * 3", 7),         # spaces between tokens
    ("  7  ", 7),
    ("0", 0),
    ("007", 7),               # leading zeros are just digits
    ("((1))", 1),
    ("999999999999*999999999999", 999999999999**2),  # 12-digit literals, exact product
    ("(" * 31 + "1" + ")" * 31, 1),                   # 63 characters of nesting
    ("1+" * 31 + "11", 42),                           # exactly 64 characters: 31 + 11
])
def test_evaluates(expression, value):
  assert evaluate_expression(expression) == value


@pytest.mark.parametrize("expression, message", [
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("2+x", "unknown character 'x' at 2"),
    ("2+X", "unknown character at 2"),       # uppercase is not quoted back
    ("2/3", "unknown character at 1"),
    ("2\t+3", "unknown character at 1"),
    ("\u0663", "unknown character at 0"),    # a non-ascii digit
    ("1.5", "unknown character '.' at 1"),
    ("__import__('os')", "unknown character at 0"),
    ("2+", "dangling operator '+' at 1"),
    ("2*3-", "dangling operator '-' at 3"),
    ("-", "dangling operator '-' at 0"),
    ("(2+3", "unbalanced parenthesis"),
    ("2+3)", "unbalanced parenthesis"),
    ("(", "unbalanced parenthesis"),
    ("((2)", "unbalanced parenthesis"),
    ("()", "unexpected ')' at 1"),
    ("2 3", "unexpected number at 2"),
    ("(2 3)", "unexpected number at 3"),
    ("2(3)", "unexpected '(' at 1"),
    ("2**3", "unexpected '*' at 2"),
    ("+3", "unexpected '+' at 0"),
    ("1" * 13, "number over 12 digits at 0"),
    ("1+" + "2" * 13, "number over 12 digits at 2"),
    ("1+" * 32 + "1", "expression over 64 chars"),
])
def test_rejects_malformed(expression, message):
  with pytest.raises(ExpressionError) as error:
    evaluate_expression(expression)
  assert str(error.value) == message
  # The model reads these messages: short, lowercase, a small alphabet.
  assert re.fullmatch(r"[a-z0-9 '():,.+\-*]{1,29}", message)


def test_expression_error_is_a_value_error():
  assert issubclass(ExpressionError, ValueError)


def test_positions_up_to_the_length_limit_keep_messages_short():
  expression = "1+" * 31 + "x"  # 63 characters, the bad one last
  with pytest.raises(ExpressionError, match=r"^unknown character 'x' at 62$"):
    evaluate_expression(expression)
  assert _arithmetic.MAX_EXPRESSION_CHARS == 64


def _random_expression(rng: np.random.Generator, depth: int) -> str:
  kind = rng.integers(4) if depth > 0 else 0
  if kind == 0:
    return str(rng.integers(0, 1000))
  if kind == 1:
    return f"-{_random_expression(rng, depth - 1)}"
  if kind == 2:
    return f"({_random_expression(rng, depth - 1)})"
  operator = "+-*"[rng.integers(3)]
  return f"{_random_expression(rng, depth - 1)}{operator}{_random_expression(rng, depth - 1)}"


def test_agrees_with_python_on_random_expressions():
  # Python's own grammar has the same precedence, associativity and unary minus; `eval` is
  # safe here only because the test wrote the strings.
  rng = np.random.default_rng(0)
  checked = 0
  while checked < 500:
    expression = _random_expression(rng, depth=4)
    if len(expression) > _arithmetic.MAX_EXPRESSION_CHARS:
      continue
    assert evaluate_expression(expression) == eval(expression), expression  # pylint: disable=eval-used
    checked += 1
