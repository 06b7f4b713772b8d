"""The in-jit calculator writes the host ToolBox's observations, token for token."""

import jax
import numpy as np
import pytest

from rlagents import hf
from rlagents import tools

TOKENIZER = hf.build_char_tokenizer()
WIDTH = 80
CALCULATOR = tools.JaxCalculator.from_tokenizer(TOKENIZER, max_call_tokens=WIDTH)
TOOLBOX = tools.ToolBox([tools.CalculatorTool()])
STATUSES = tools.CALL_STATUSES

CASES = [
    "calc(2+3*4)", "calc((2+3)*4)", "calc(-3*2)", "calc(10-2-3)", "calc(2*-3)", "calc(--4)",
    "calc(-(2+3)*2)", "calc(1 + 2 * 3)", "calc(  7  )", "calc(007)", "calc(" + "(" * 31 + "1"
    + ")" * 31 + ")", "calc(" + "1+" * 31 + "11)", "calc()", "calc(   )", "calc(2+x)",
    "calc(2/3)", "calc(1.5)", "calc(2+)", "calc(-)", "calc((2+3)", "calc(2+3))", "calc(()",
    "calc(())", "calc(2 3)", "calc((2 3))", "calc(2(3))", "calc(2**3)", "calc(+3)",
    "calc(" + "1" * 13 + ")", "calc(1" + "+1" * 32 + ")", "foo(1)", "calc", "calc(", "calc)",
    " calc(3) ", "1calc(2)", "abcdefghijklmnop(3)", "calc(<obs>1)", "calc(1<answer>)",
    "calc(2+3)x", "calc(999*999*999)", "calc(2147483647)", "calc(0-2147483647-1)",
    "calc(-46340*46340)", "calc(1)(2)", "calc(a:b)", "calc((1+2)*(3+4)-(5-6)*7)",
]


def _random_cases(n, seed=0):
  rng = np.random.default_rng(seed)
  chars = list("0123456789+-*() ")
  p = [.07] * 10 + [.06, .06, .06, .05, .05, .02]
  return ["calc(" + "".join(rng.choice(chars, rng.integers(1, 20), p=p)) + ")"
          for _ in range(n)]


@jax.jit
def _execute(tokens, lengths):
  return jax.vmap(lambda t, n: CALCULATOR.execute(t, n, jax.random.key(0)))(tokens, lengths)


def test_observations_and_statuses_equal_the_host_toolbox():
  cases = CASES + _random_cases(1000)
  tokens = np.zeros((len(cases), WIDTH), np.int32)
  lengths = np.zeros(len(cases), np.int32)
  for i, case in enumerate(cases):
    ids = TOKENIZER.encode(case, add_special_tokens=False)
    tokens[i, :len(ids)], lengths[i] = ids, len(ids)
  out = jax.device_get(_execute(tokens, lengths))
  compared = out_of_range = 0
  seen = set()
  for i, case in enumerate(cases):
    host = TOOLBOX.execute(case, np.random.default_rng(0))
    ours = TOKENIZER.decode(out.observation[i, :out.observation_length[i]])
    if ours == "error: out of range":  # int32 only: the host's value must be outside it
      assert abs(int(host.observation)) >= 2**31, case
      out_of_range += 1
      continue
    assert (ours, STATUSES[out.status[i]]) == (host.observation, host.status), case
    seen.add(host.status)
    compared += 1
  assert compared > 900 and len(seen) == 4, (compared, seen)  # ok, invalid, malformed, unknown tool
  assert out_of_range < 60


@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_busy_failures_are_drawn_only_for_valid_calls(rate):
  calculator = tools.JaxCalculator.from_tokenizer(TOKENIZER, failure_rate=rate)
  ids = np.zeros(32, np.int32)
  call = TOKENIZER.encode("calc(2+2)", add_special_tokens=False)
  ids[:len(call)] = call
  keys = jax.random.split(jax.random.key(1), 400)
  out = jax.jit(jax.vmap(lambda k: calculator.execute(ids, len(call), k)))(keys)
  busy = np.mean(np.asarray(out.status) == tools.CALL_STATUSES.index(tools.CallStatus.TRANSIENT_ERROR))
  assert abs(busy - rate) < 0.08, busy
