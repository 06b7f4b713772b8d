"""Every sandbox test runs twice: with a fresh sandbox per run, and through a `SandboxPool`
of pre-started sandboxes (`sandbox.pooled`), which must contain every attack the same way.

The pooled runs are slow tests (the default command runs the fresh ones). The pool is made
inside each test's private temp dir and closed before that dir is checked for leftovers.
"""

import pytest

from rlagents import sandbox


@pytest.fixture(autouse=True, params=["fresh", pytest.param("pool", marks=pytest.mark.slow)])
def sandbox_route(request):
  if request.param == "pool" and "pool" in request.fixturenames:
    # test_pool.py's tests make their own pool; a second one around it would start its
    # replacement workers in the test's private temp dir.
    pytest.skip("runs through its own pool already")
  for name in ("host_unchanged", "private_tempdir"):
    if name in request.fixturenames:
      request.getfixturevalue(name)  # set up first, so checked after the pool is closed
  if request.param == "fresh" or sandbox.kernel_isolation_problem() is not None:
    yield request.param
    return
  with sandbox.SandboxPool(size=2) as pool, sandbox.pooled(pool):
    yield request.param
