"""The calculator tool as a pure JAX function on token ids, for episodes that run inside `jit`.

`JaxCalculator.execute(call_tokens, call_length, key)` does on token ids what
`ToolBox([CalculatorTool(...)]).execute(text, rng)` does on the decoded text: parse
`name(arguments)`, check the tool name, evaluate the integer expression (`+ - *`, unary minus,
parentheses, spaces) and return the observation (the value, or an `error: ...` message) as token
ids. The messages, their positions (0-based character indices into the arguments, special tokens
counting as their text, e.g. `<obs>` is 5 characters) and the order in which errors are found
are the host evaluator's (`rlagents.tools._arithmetic`), so an episode in `jit` writes the same
text as the host rollout.

One difference, from the fixed width of JAX integers: values are int32 (no `jax_enable_x64`).
Any number or intermediate value outside [-2**31, 2**31) gives the observation
`error: out of range` (status INVALID_ARGUMENTS), where the host, exact on Python integers,
returns the value. The calculator suite's in-distribution problems (3 numbers of <= 3 digits,
|value| < 10**9) never come near; 4-operand `heldout_ood` problems can.

The evaluator is one `lax.scan` over the call's tokens, a state machine of the grammar in
`_arithmetic` (LL(1), so the first error it meets is the recursive-descent parser's): per open
parenthesis level it keeps the sum of finished terms, the sign before the current term, the
product so far of the current term and a pending unary minus.
"""

import dataclasses
import enum
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from rlagents.tools import _arithmetic
from rlagents.tools import _protocol



class CharClass(enum.IntEnum):
  """The character class of a token, as the calculator's parser (and the text env) reads it."""
  SPACE = 0
  DIGIT = 1
  PLUS = 2
  MINUS = 3
  STAR = 4
  LPAREN = 5
  RPAREN = 6
  QUOTABLE = 7
  OTHER = 8


_CLASS_OF_CHAR = {" ": CharClass.SPACE, "+": CharClass.PLUS, "-": CharClass.MINUS,
                  "*": CharClass.STAR, "(": CharClass.LPAREN, ")": CharClass.RPAREN}
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyz_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")
_INT_MAX = 2**31 - 1

# Status codes, in the order of `CALL_STATUSES`.
CALL_STATUSES = (_protocol.CallStatus.OK, _protocol.CallStatus.MALFORMED,
                 _protocol.CallStatus.UNKNOWN_TOOL, _protocol.CallStatus.INVALID_ARGUMENTS,
                 _protocol.CallStatus.TRANSIENT_ERROR)
OK, MALFORMED, UNKNOWN_TOOL, INVALID_ARGUMENTS, TRANSIENT_ERROR = range(5)

# Messages: (text before the quoted character, quote a character?, text after it, add the
# position?). Index = message code; 0 is a plain value (no message).
_VALUE = 0
_MESSAGES = (
    ("", False, "", False),                                                     # the value
    ("error: bad call, use name(args)", False, "", False),                      # malformed
    ("error: no tool ", False, "", False),                                      # + name[:12]
    (f"error: expression over {_arithmetic.MAX_EXPRESSION_CHARS} chars", False, "", False),
    (f"error: number over {_arithmetic.MAX_NUMBER_DIGITS} digits at ", False, "", True),
    ("error: unknown character ", True, " at ", True),
    ("error: unknown character at ", False, "", True),
    ("error: empty expression", False, "", False),
    ("error: unexpected number at ", False, "", True),
    ("error: unexpected ", True, " at ", True),
    ("error: unbalanced parenthesis", False, "", False),
    ("error: dangling operator ", True, " at ", True),
    ("error: busy, retry", False, "", False),
    ("error: out of range", False, "", False),
)
(_, _MALFORMED_MSG, _NO_TOOL_MSG, _TOO_LONG_MSG, _LONG_NUMBER_MSG, _UNKNOWN_QUOTED_MSG,
 _UNKNOWN_MSG, _EMPTY_MSG, _UNEXPECTED_NUMBER_MSG, _UNEXPECTED_MSG, _UNBALANCED_MSG,
 _DANGLING_MSG, _BUSY_MSG, _RANGE_MSG) = range(len(_MESSAGES))
_MAX_DEPTH = _arithmetic.MAX_EXPRESSION_CHARS // 2 + 1  # '(' levels a valid 64-char call can open
_MAX_NAME_SHOWN = 12  # "error: no tool {name[:12]}"


@flax.struct.dataclass
class ToolOutput:
  """The result of one call, for one episode (vmap for a batch).

  Attributes:
    observation: `[max_observation_tokens]` int32, the observation text's token ids (no
      `<obs>` markers), padded with 0.
    observation_length: int32 scalar, its number of tokens.
    status: int32 scalar, an index into `CALL_STATUSES`.
    value: int32 scalar, the value when `status == OK`, else 0.
  """
  observation: jax.Array
  observation_length: jax.Array
  status: jax.Array
  value: jax.Array


def _checked_add(a, b):
  total = a + b  # wraps on overflow
  return total, ((a >= 0) == (b >= 0)) & ((total >= 0) != (a >= 0))


def _checked_sub(a, b):
  difference = a - b
  return difference, ((a >= 0) != (b >= 0)) & ((difference >= 0) != (a >= 0))


def _checked_mul(a, b):
  product = a * b  # wraps; exact iff dividing back gives b (INT_MIN * -1 checked apart)
  safe_a = jnp.where(a == 0, 1, a)
  wrapped = (a != 0) & ((product // safe_a != b) | (product % safe_a != 0))
  int_min = jnp.int32(-_INT_MAX - 1)
  wrapped |= ((a == -1) & (b == int_min)) | ((b == -1) & (a == int_min))
  return product, wrapped


@dataclasses.dataclass(frozen=True, eq=False)
class JaxCalculator:
  """The calculator, on the token ids of one tokenizer; pure JAX, jittable and vmappable.

  Build it with `JaxCalculator.from_tokenizer(tokenizer)` (host code: it reads the vocabulary
  once); `execute` then needs no host. Tables are numpy arrays baked into the compiled program.

  Attributes:
    char_class: `[V]` int32, the class of each token id's text (a special token is
      `CharClass.OTHER`, as its text starts with '<').
    char_length: `[V]` int32, the length of each token id's decoded text.
    digit_value: `[V]` int32, 0-9 for digit tokens, else 0.
    name_char: `[V]` bool, a character of a tool name (`[a-z0-9_]`).
    name_start: `[V]` bool, a first character of a tool name (`[a-z_]`).
    tool_name: `[n]` int32, the ids of the tool's name ('calc').
    message_tokens: `[M, T]` int32 and `message_lengths` `[M, 3]`: the fixed pieces of each
      message (before the quote, after it), as token ids.
    digit_tokens: `[10]` int32, the ids of '0'..'9'.
    minus_token, quote_token: the ids of '-' and "'".
    failure_rate: probability that a valid call fails with `error: busy, retry`.
    max_call_tokens: calls are read from a window of this many tokens.
    max_observation_tokens: the width of `ToolOutput.observation`.
  """
  char_class: np.ndarray
  char_length: np.ndarray
  digit_value: np.ndarray
  name_char: np.ndarray
  name_start: np.ndarray
  tool_name: np.ndarray
  message_tokens: np.ndarray
  message_lengths: np.ndarray
  digit_tokens: np.ndarray
  minus_token: int
  quote_token: int
  failure_rate: float = 0.0
  max_call_tokens: int = 32
  max_observation_tokens: int = 48

  @classmethod
  def from_tokenizer(cls, tokenizer: Any, *, failure_rate: float = 0.0, name: str = "calc",
                     max_call_tokens: int = 32) -> "JaxCalculator":
    """Reads the tables from a character-level tokenizer (host code, not jittable).

    Args:
      tokenizer: a transformers tokenizer in which every character of the calculator's
        messages is one token (as `rlagents.hf.build_char_tokenizer()`).
      failure_rate: as `CalculatorTool`'s.
      name: the tool's name.
      max_call_tokens: the longest call text read (tokens between `<call>` and `</call>`).
    """
    if not 0.0 <= failure_rate < 1.0:
      raise ValueError(f"failure_rate must be in [0, 1), got {failure_rate}")
    vocab_size = len(tokenizer)
    texts = [tokenizer.decode([i]) for i in range(vocab_size)]
    char_class = np.full(vocab_size, CharClass.OTHER, np.int32)
    for i, text in enumerate(texts):
      if len(text) != 1:
        continue
      if text.isdigit() and text.isascii():
        char_class[i] = CharClass.DIGIT
      elif text in _CLASS_OF_CHAR:
        char_class[i] = _CLASS_OF_CHAR[text]
      elif text in _arithmetic._QUOTABLE:  # pylint: disable=protected-access
        char_class[i] = CharClass.QUOTABLE

    def ids(text: str) -> np.ndarray:
      encoded = tokenizer.encode(text, add_special_tokens=False)
      if tokenizer.decode(encoded) != text or len(encoded) != len(text):
        raise ValueError(f"the tokenizer does not write {text!r} one character per token")
      return np.asarray(encoded, np.int32)

    pieces = [(ids(before), ids(after)) for before, _, after, _ in _MESSAGES]
    width = max(len(p) for pair in pieces for p in pair)
    message_tokens = np.zeros((len(_MESSAGES), 2, width), np.int32)
    message_lengths = np.zeros((len(_MESSAGES), 2), np.int32)
    for m, pair in enumerate(pieces):
      for j, piece in enumerate(pair):
        message_tokens[m, j, :len(piece)] = piece
        message_lengths[m, j] = len(piece)
    lengths = np.array([len(t) for t in texts], np.int32)
    return cls(
        char_class=char_class,
        char_length=lengths,
        digit_value=np.array([int(t) if len(t) == 1 and t.isdigit() else 0 for t in texts],
                             np.int32),
        name_char=np.array([len(t) == 1 and t in _NAME_CHARS for t in texts]),
        name_start=np.array([len(t) == 1 and t in _NAME_START for t in texts]),
        tool_name=ids(name),
        message_tokens=message_tokens,
        message_lengths=message_lengths,
        digit_tokens=ids("0123456789"),
        minus_token=int(ids("-")[0]),
        quote_token=int(ids("'")[0]),
        failure_rate=failure_rate,
        max_call_tokens=max_call_tokens,
        max_observation_tokens=max(48, width * 2 + 16),
    )

  def execute(self, call_tokens: jax.Array, call_length: jax.Array,
              key: jax.Array) -> ToolOutput:
    """Runs one call; every failure is an `error: ...` observation, as `ToolBox.execute`.

    Args:
      call_tokens: `[W]` int32 (`W == max_call_tokens`), the text between `<call>` and
        `</call>` in its first `call_length` entries.
      call_length: int32 scalar, `0 <= call_length <= W`.
      key: draws the transient failure (`failure_rate`).

    Returns:
      A `ToolOutput`.
    """
    width = self.max_call_tokens
    call_tokens = jnp.asarray(call_tokens, jnp.int32)
    if call_tokens.shape != (width,):
      raise ValueError(f"call_tokens must be [{width}], got {call_tokens.shape}")
    index = jnp.arange(width)
    in_call = index < call_length
    cls = jnp.where(in_call, jnp.asarray(self.char_class)[call_tokens], CharClass.SPACE)

    # `text.strip()`, then `[a-z_][a-z0-9_]*\((.*)\)` on what is left.
    not_space = in_call & (cls != CharClass.SPACE)
    first = jnp.argmax(not_space)
    last = width - 1 - jnp.argmax(not_space[::-1])  # the last non-space token
    name_char = jnp.asarray(self.name_char)[call_tokens] & in_call
    after_first = index >= first
    name_end = jnp.argmax(after_first & ~name_char)  # the first non-name token from `first`
    name_end = jnp.where(jnp.any(after_first & ~name_char), name_end, width)
    safe = lambda i: jnp.clip(i, 0, width - 1)
    well_formed = (jnp.any(not_space)
                   & jnp.asarray(self.name_start)[call_tokens[safe(first)]]
                   & (name_end < last)
                   & (cls[safe(name_end)] == CharClass.LPAREN)
                   & (cls[safe(last)] == CharClass.RPAREN))
    name_length = name_end - first
    tool_name = jnp.asarray(self.tool_name)
    name_window = call_tokens[safe(first + jnp.arange(tool_name.shape[0]))]
    known_tool = (name_length == tool_name.shape[0]) & jnp.all(name_window == tool_name)

    # The arguments: tokens (name_end, last).
    in_args = (index > name_end) & (index < last)
    arg_chars = jnp.where(in_args, jnp.asarray(self.char_length)[call_tokens], 0)
    position = jnp.cumsum(arg_chars) - arg_chars  # character index of each token in the args
    too_long = arg_chars.sum() > _arithmetic.MAX_EXPRESSION_CHARS
    scan_out = self._evaluate(call_tokens, jnp.where(in_args, cls, -1), position)
    value, message, message_position, message_char = scan_out
    message = jnp.where(too_long, _TOO_LONG_MSG, message)
    busy = (message == _VALUE) & (jax.random.uniform(key) < self.failure_rate)
    message = jnp.where(busy, _BUSY_MSG, message)
    message = jnp.where(known_tool, message, _NO_TOOL_MSG)
    message = jnp.where(well_formed, message, _MALFORMED_MSG)

    status = jnp.select(
        [~well_formed, ~known_tool, busy, message == _VALUE],
        [MALFORMED, UNKNOWN_TOOL, TRANSIENT_ERROR, OK], INVALID_ARGUMENTS).astype(jnp.int32)
    name_shown = jnp.minimum(name_length, _MAX_NAME_SHOWN)
    observation, length = self._observation(
        message, message_position, message_char, value, call_tokens, first, name_shown)
    return ToolOutput(observation=observation, observation_length=length, status=status,
                      value=jnp.where(status == OK, value, 0))

  def _evaluate(self, tokens, cls, position):
    """The lexer, the parser and the evaluator in one pass over the argument tokens.

    `cls` is -1 outside the arguments. Returns (value, message code, message position, token
    to quote): the first lexical error anywhere, else the first syntax error, else an overflow,
    else `_VALUE`.
    """
    slots = _MAX_DEPTH + 1
    digit_value = jnp.asarray(self.digit_value)
    int32 = jnp.int32
    init = dict(
        lex_message=int32(_VALUE), lex_position=int32(0), lex_char=int32(0),
        parse_message=int32(_VALUE), parse_position=int32(0), parse_char=int32(0),
        in_number=jnp.bool_(False), number_start=int32(0), number_digits=int32(0),
        number=int32(0), number_overflow=jnp.bool_(False), overflow=jnp.bool_(False),
        expect_operand=jnp.bool_(True), depth=int32(0), seen_token=jnp.bool_(False),
        last_class=int32(CharClass.SPACE), last_position=int32(0), last_char=int32(0),
        sums=jnp.zeros(slots, int32), minus=jnp.zeros(slots, bool),
        terms=jnp.ones(slots, int32), negate=jnp.zeros(slots, bool))

    def first_error(c, kind, message, at, char, when):
      """Records `message` if `when` and no error of this `kind` ('lex'/'parse') came first."""
      new = when & (c[f"{kind}_message"] == _VALUE)
      c[f"{kind}_message"] = jnp.where(new, message, c[f"{kind}_message"])
      c[f"{kind}_position"] = jnp.where(new, at, c[f"{kind}_position"])
      c[f"{kind}_char"] = jnp.where(new, char, c[f"{kind}_char"])
      return c

    def set_at(array, d, value, when):
      return array.at[d].set(jnp.where(when, value, array[d]))

    def apply_operand(c, value, when):
      """Multiplies an operand (negated if a unary minus is pending) into the current term."""
      d = jnp.clip(c["depth"], 0, _MAX_DEPTH)
      negated, negate_over = _checked_sub(int32(0), value)
      signed = jnp.where(c["negate"][d], negated, value)
      product, product_over = _checked_mul(c["terms"][d], signed)
      c["overflow"] |= when & ((c["negate"][d] & negate_over) | product_over)
      c["terms"] = set_at(c["terms"], d, product, when)
      c["negate"] = set_at(c["negate"], d, False, when)
      c["expect_operand"] = jnp.where(when, False, c["expect_operand"])
      return c

    def end_number(c, when):
      """A number ends: an operand where one is expected, else 'unexpected number'."""
      c["overflow"] |= when & c["expect_operand"] & c["number_overflow"]
      c = first_error(c, "parse", _UNEXPECTED_NUMBER_MSG, c["number_start"], 0,
                      when & ~c["expect_operand"])
      return apply_operand(c, c["number"], when & c["expect_operand"])

    def level_value(c, d):
      """sums[d] +/- terms[d]: the value of level d so far, and whether it overflowed."""
      total, total_over = _checked_add(c["sums"][d], c["terms"][d])
      difference, difference_over = _checked_sub(c["sums"][d], c["terms"][d])
      return (jnp.where(c["minus"][d], difference, total),
              jnp.where(c["minus"][d], difference_over, total_over))

    def step(c, inputs):
      token, k, at = inputs
      c = dict(c)
      valid = k >= 0
      # Digits extend or start a number; any other token ends one first.
      is_digit = valid & (k == CharClass.DIGIT)
      extend = is_digit & c["in_number"]
      start = is_digit & ~c["in_number"]
      tenfold, tenfold_over = _checked_mul(c["number"], int32(10))
      extended, extended_over = _checked_add(tenfold, digit_value[token])
      digits = jnp.where(extend, c["number_digits"] + 1, 1)
      c = first_error(c, "lex", _LONG_NUMBER_MSG, c["number_start"], 0,
                      extend & (digits == _arithmetic.MAX_NUMBER_DIGITS + 1))
      c["number_overflow"] = jnp.where(
          start, False, c["number_overflow"] | (extend & (tenfold_over | extended_over)))
      c["number"] = jnp.where(start, digit_value[token],
                              jnp.where(extend, extended, c["number"]))
      c["number_start"] = jnp.where(start, at, c["number_start"])
      c["number_digits"] = jnp.where(is_digit, digits, c["number_digits"])
      c = end_number(c, valid & ~is_digit & c["in_number"])
      c["in_number"] = jnp.where(valid, is_digit, c["in_number"])
      # Characters outside the grammar.
      c = first_error(c, "lex", _UNKNOWN_QUOTED_MSG, at, token, valid & (k == CharClass.QUOTABLE))
      c = first_error(c, "lex", _UNKNOWN_MSG, at, 0, valid & (k == CharClass.OTHER))

      is_op = valid & (k >= CharClass.PLUS) & (k <= CharClass.RPAREN)
      expect = c["expect_operand"]
      d = jnp.clip(c["depth"], 0, _MAX_DEPTH)
      # Expecting an operand: '-' is unary, '(' opens a level, '+', '*' and ')' are unexpected.
      unary = is_op & expect & (k == CharClass.MINUS)
      c["negate"] = set_at(c["negate"], d, ~c["negate"][d], unary)
      opens = is_op & expect & (k == CharClass.LPAREN)
      inner = jnp.clip(d + 1, 0, _MAX_DEPTH)
      c["sums"] = set_at(c["sums"], inner, 0, opens)
      c["terms"] = set_at(c["terms"], inner, 1, opens)
      c["minus"] = set_at(c["minus"], inner, False, opens)
      c["negate"] = set_at(c["negate"], inner, False, opens)
      c = first_error(c, "parse", _UNEXPECTED_MSG, at, token,
                      is_op & expect & ((k == CharClass.PLUS) | (k == CharClass.STAR)
                                        | (k == CharClass.RPAREN)))
      # After an operand: '+'/'-' end a term, '*' continues it, ')' closes a level, '(' is
      # unexpected.
      additive = is_op & ~expect & ((k == CharClass.PLUS) | (k == CharClass.MINUS))
      level, level_over = level_value(c, d)
      c["overflow"] |= additive & level_over
      c["sums"] = set_at(c["sums"], d, level, additive)
      c["minus"] = set_at(c["minus"], d, k == CharClass.MINUS, additive)
      c["terms"] = set_at(c["terms"], d, 1, additive)
      closes = is_op & ~expect & (k == CharClass.RPAREN)
      c = first_error(c, "parse", _UNBALANCED_MSG, at, 0, closes & (c["depth"] == 0))
      c = first_error(c, "parse", _UNEXPECTED_MSG, at, token,
                      is_op & ~expect & (k == CharClass.LPAREN))
      closing = closes & (c["depth"] > 0)
      c["overflow"] |= closing & level_over
      c["depth"] = c["depth"] + opens.astype(int32) - closing.astype(int32)
      c = apply_operand(c, level, closing)  # the closed level's value, one level out
      c["expect_operand"] |= additive | (is_op & ~expect & (k == CharClass.STAR))
      counted = valid & (k != CharClass.SPACE)
      c["seen_token"] |= counted
      c["last_class"] = jnp.where(counted, k, c["last_class"])
      c["last_position"] = jnp.where(counted, at, c["last_position"])
      c["last_char"] = jnp.where(counted, token, c["last_char"])
      return c, None

    c, _ = lax.scan(step, init, (tokens, cls, position))
    # End of input: a number still open ends; then the expression must be complete.
    c = end_number(c, c["in_number"])
    incomplete = c["expect_operand"] & c["seen_token"]
    c = first_error(c, "parse", _UNBALANCED_MSG, 0, 0,
                    (incomplete & (c["last_class"] == CharClass.LPAREN))
                    | (~c["expect_operand"] & (c["depth"] > 0)))
    c = first_error(c, "parse", _DANGLING_MSG, c["last_position"], c["last_char"], incomplete)
    value, value_over = level_value(c, 0)
    lexical = c["lex_message"] != _VALUE
    message = jnp.select(
        [lexical, ~c["seen_token"], c["parse_message"] != _VALUE, c["overflow"] | value_over],
        [c["lex_message"], _EMPTY_MSG, c["parse_message"], _RANGE_MSG], _VALUE)
    at = jnp.where(lexical, c["lex_position"], c["parse_position"])
    char = jnp.where(lexical, c["lex_char"], c["parse_char"])
    return value, message.astype(int32), at, char

  def _observation(self, message, at, char, value, call_tokens, name_start, name_length):
    """Writes the observation text: a message's pieces, or the value's digits."""
    width = self.max_observation_tokens
    out = jnp.zeros(width, jnp.int32)
    spec = np.array([[quote, with_position] for _, quote, _, with_position in _MESSAGES])
    quote, with_position = jnp.asarray(spec[:, 0])[message], jnp.asarray(spec[:, 1])[message]
    pieces = jnp.asarray(self.message_tokens)[message]      # [2, T]
    lengths = jnp.asarray(self.message_lengths)[message]    # [2]

    def put(out, offset, piece, length):
      slots = jnp.arange(piece.shape[0])
      target = jnp.where(slots < length, offset + slots, width)
      return out.at[target].set(piece, mode="drop"), offset + length

    out, offset = put(out, 0, pieces[0], lengths[0])
    quoted = jnp.array([self.quote_token, 0, self.quote_token], jnp.int32).at[1].set(char)
    out, offset = put(out, offset, quoted, jnp.where(quote, 3, 0))
    out, offset = put(out, offset, pieces[1], lengths[1])
    name = call_tokens[jnp.clip(name_start + jnp.arange(_MAX_NAME_SHOWN), 0,
                                call_tokens.shape[0] - 1)]
    out, offset = put(out, offset, name, jnp.where(message == _NO_TOOL_MSG, name_length, 0))
    number = jnp.where(message == _VALUE, value, at)
    digits, digit_count = self._decimal(number)
    out, offset = put(out, offset, digits, jnp.where((message == _VALUE) | with_position,
                                                     digit_count, 0))
    return out, offset

  def _decimal(self, number):
    """`str(number)` as token ids `[11]` and its length, for an int32 `number`."""
    magnitude = jnp.abs(number).astype(jnp.uint32)  # |-2**31| wraps to 2**31 in uint32: exact
    powers = jnp.asarray(10 ** np.arange(9, -1, -1), jnp.uint32)
    digits = (magnitude // powers) % 10
    count = jnp.maximum(1, 10 - jnp.argmax(jnp.append(digits, 1) != 0))
    count = jnp.where(magnitude == 0, 1, count)
    tokens = jnp.asarray(self.digit_tokens)[digits.astype(jnp.int32)]
    # Right-align: the `count` last digits, after a '-' for negative numbers.
    shifted = jnp.roll(tokens, count - 10)  # the significant digits first
    negative = number < 0
    with_sign = jnp.where(negative, jnp.concatenate([jnp.array([self.minus_token]), shifted]),
                          jnp.concatenate([shifted, jnp.zeros(1, jnp.int32)]))
    return with_sign.astype(jnp.int32), count + negative.astype(jnp.int32)

