"""A safe evaluator for small integer arithmetic expressions (host code, never `eval`).

Grammar (spaces are allowed between tokens, precedence as usual, operators left-associative):

    expression := term (('+' | '-') term)*
    term       := unary ('*' unary)*
    unary      := '-' unary | primary
    primary    := NUMBER | '(' expression ')'
    NUMBER     := 1 to 12 ascii digits

Error messages are observations a small character-level model reads: each is shorter than 30
characters, uses only lowercase letters, digits, spaces and `'():,.+-*`, and gives positions as
0-based character indices into the input.
"""

import dataclasses

MAX_EXPRESSION_CHARS = 64
MAX_NUMBER_DIGITS = 12

_DIGITS = frozenset("0123456789")
_OPERATORS = frozenset("+-*")
_PUNCTUATION = frozenset("()")
# Characters that can be quoted back in a message without breaking its alphabet.
_QUOTABLE = frozenset("abcdefghijklmnopqrstuvwxyz,.:")


class ExpressionError(ValueError):
  """A malformed expression; the message is short enough to show to the model."""


@dataclasses.dataclass(frozen=True)
class _Token:
  text: str  # A number's digits, or one of `+-*()`.
  position: int

  @property
  def is_number(self) -> bool:
    return self.text[0] in _DIGITS

  def describe(self) -> str:
    return "number" if self.is_number else f"'{self.text}'"


def _tokenize(expression: str) -> list[_Token]:
  tokens = []
  position = 0
  while position < len(expression):
    char = expression[position]
    if char == " ":
      position += 1
    elif char in _DIGITS:
      end = position
      while end < len(expression) and expression[end] in _DIGITS:
        end += 1
      if end - position > MAX_NUMBER_DIGITS:
        raise ExpressionError(f"number over {MAX_NUMBER_DIGITS} digits at {position}")
      tokens.append(_Token(expression[position:end], position))
      position = end
    elif char in _OPERATORS or char in _PUNCTUATION:
      tokens.append(_Token(char, position))
      position += 1
    elif char in _QUOTABLE:
      raise ExpressionError(f"unknown character '{char}' at {position}")
    else:
      raise ExpressionError(f"unknown character at {position}")
  return tokens


class _Parser:
  """Recursive descent over the token list; one method per grammar rule."""

  def __init__(self, tokens: list[_Token]):
    self._tokens = tokens
    self._index = 0

  def _peek(self) -> _Token | None:
    return self._tokens[self._index] if self._index < len(self._tokens) else None

  def _advance(self) -> _Token:
    token = self._tokens[self._index]
    self._index += 1
    return token

  def parse(self) -> int:
    value = self._expression()
    token = self._peek()
    if token is None:
      return value
    if token.text == ")":
      raise ExpressionError("unbalanced parenthesis")
    raise ExpressionError(f"unexpected {token.describe()} at {token.position}")

  def _expression(self) -> int:
    value = self._term()
    while (token := self._peek()) is not None and token.text in ("+", "-"):
      self._advance()
      rhs = self._term()
      value = value + rhs if token.text == "+" else value - rhs
    return value

  def _term(self) -> int:
    value = self._unary()
    while (token := self._peek()) is not None and token.text == "*":
      self._advance()
      value *= self._unary()
    return value

  def _unary(self) -> int:
    token = self._peek()
    if token is not None and token.text == "-":
      self._advance()
      return -self._unary()
    return self._primary()

  def _primary(self) -> int:
    token = self._peek()
    if token is None:
      # The input is non-empty, so something precedes the missing operand.
      previous = self._tokens[self._index - 1]
      if previous.text == "(":
        raise ExpressionError("unbalanced parenthesis")
      raise ExpressionError(f"dangling operator '{previous.text}' at {previous.position}")
    self._advance()
    if token.is_number:
      return int(token.text)
    if token.text != "(":
      raise ExpressionError(f"unexpected {token.describe()} at {token.position}")
    value = self._expression()
    closing = self._peek()
    if closing is None:
      raise ExpressionError("unbalanced parenthesis")
    if closing.text != ")":
      raise ExpressionError(f"unexpected {closing.describe()} at {closing.position}")
    self._advance()
    return value


def evaluate_expression(expression: str) -> int:
  """Evaluates integer arithmetic with `+ - *`, unary minus and parentheses.

  Example: `evaluate_expression('2+3*4')` is 14 and `evaluate_expression('(2+3)*4')` is 20.

  Args:
    expression: at most 64 characters of non-negative integer literals (at most 12 digits
      each), binary `+ - *`, unary `-`, parentheses and spaces.

  Returns:
    The exact integer value.

  Raises:
    ExpressionError: the expression is malformed; the message says what and where.
  """
  if len(expression) > MAX_EXPRESSION_CHARS:
    raise ExpressionError(f"expression over {MAX_EXPRESSION_CHARS} chars")
  tokens = _tokenize(expression)
  if not tokens:
    raise ExpressionError("empty expression")
  return _Parser(tokens).parse()
