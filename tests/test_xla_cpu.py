"""The XLA CPU work-around `import rlagents` applies (rlagents/_xla_cpu.py)."""

import os
import subprocess
import sys
import textwrap

import pytest

from rlagents import _xla_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str, timeout: float, **env) -> subprocess.CompletedProcess:
  environ = {k: v for k, v in os.environ.items()
             if k not in ("XLA_FLAGS", "RLAGENTS_KEEP_XLA_FLAGS")}
  environ.update(env)
  environ["PYTHONPATH"] = ROOT
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ, text=True,
                        capture_output=True, timeout=timeout, check=True)


_PRINT_FLAGS = """
    import rlagents, os
    print(os.environ.get("XLA_FLAGS", ""))
"""


def test_import_turns_the_scheduler_off_and_keeps_other_flags():
  out = _run(_PRINT_FLAGS, 60, XLA_FLAGS="--xla_force_host_platform_device_count=2").stdout
  assert out.split() == ["--xla_force_host_platform_device_count=2", f"{_xla_cpu.FLAG}=false"]


def test_an_explicit_setting_or_the_opt_out_is_kept():
  kept = f"{_xla_cpu.FLAG}=true"
  assert _run(_PRINT_FLAGS, 60, XLA_FLAGS=kept).stdout.split() == [kept]
  assert _run(_PRINT_FLAGS, 60, RLAGENTS_KEEP_XLA_FLAGS="1").stdout.split() == []


def test_nothing_is_added_once_the_backend_has_started():
  out = _run("""
      import jax, os
      jax.devices()
      import rlagents
      print(repr(os.environ.get("XLA_FLAGS", "")))
  """, 60).stdout
  assert out.strip() == "''"


@pytest.mark.slow
def test_repeated_calls_of_vmapped_ppo_return():
  # Deadlocked on the 2nd-4th call under jaxlib 0.10.2's default CPU scheduler (5 of 5 runs).
  out = _run("""
      import jax
      from rlagents.learners import ppo
      config = ppo.PPOConfig(total_timesteps=100_000, num_envs=4, num_steps=128,
                             update_epochs=4, num_minibatches=4, bootstrap_truncation=False)
      train = jax.jit(jax.vmap(ppo.make_train(config)))
      for seed in range(4):
        jax.block_until_ready(train(jax.random.split(jax.random.key(seed), 8)))
        print(seed, flush=True)
  """, 300).stdout
  assert out.split() == ["0", "1", "2", "3"]
