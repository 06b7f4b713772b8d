"""The entry points as a user meets them: `--help` documents every flag, bad input is one line.

Each case runs `python -m experiments.<name> ...` in a subprocess from the checkout.
"""

import os
import re
import subprocess
import sys

import pytest

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_ABSL_ENTRY_POINTS = ("train_agent", "train_control", "train_selfplay", "replay", "review")
_DEFINE = re.compile(r"DEFINE_\w+\(\s*\"(\w+)\",")


def _run(*args, timeout=240):
  env = {**os.environ, "PYTHONPATH": _ROOT, "JAX_PLATFORMS": "cpu"}
  return subprocess.run([sys.executable, "-m", *args], cwd=_ROOT, env=env, capture_output=True,
                        text=True, timeout=timeout, check=False)


def _error_line(result):
  """The last non-empty stderr line; asserts there is no traceback."""
  assert "Traceback" not in result.stderr, result.stderr[-2000:]
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  return lines[-1]


@pytest.mark.parametrize("name", _ABSL_ENTRY_POINTS)
def test_help_documents_every_flag(name):
  with open(os.path.join(_ROOT, "experiments", f"{name}.py")) as f:
    flag_names = _DEFINE.findall(f.read())
  assert flag_names, f"no flags found in experiments/{name}.py"
  result = _run(f"experiments.{name}", "--help")
  assert result.returncode in (0, 1), result.stderr[-2000:]  # absl exits 1 after --help
  assert "Traceback" not in result.stderr
  for flag in flag_names:
    match = re.search(rf"--{flag}:\s*(.+)", result.stdout)
    assert match, f"--{flag} missing from experiments.{name} --help:\n{result.stdout}"
    assert len(match.group(1).strip()) > 10, f"--{flag} has no help text"
  # The module docstring, with the run commands, heads the help.
  assert f"python -m experiments.{name}" in result.stdout


def test_summarize_runs_help_and_missing_report(tmp_path):
  result = _run("experiments.summarize_runs", "--help")
  assert result.returncode == 0 and "Usage:" in result.stdout
  result = _run("experiments.summarize_runs", str(tmp_path))
  assert result.returncode == 1
  assert _error_line(result) == (f"error: no report.json in {tmp_path} (a finished train_agent "
                                 "workdir holds one)")


@pytest.mark.parametrize("args, message", [
    (["--config.ppo.learning_rat=1"],
     "error: unknown config key 'ppo.learning_rat', did you mean 'learning_rate'?"),
    (["--config=experiments/configs/control.py:mazee"],
     "error: unknown config variant(s) ['mazee'], did you mean 'maze'?"),
    (["--config=experiments/configs/control.py:smoke", "--config.ppo.learning_rate=-1"],
     "error: PPOConfig.learning_rate must be > 0, got -1.0"),
], ids=["unknown_key", "unknown_variant", "impossible_value"])
def test_train_control_bad_config_is_one_line_with_a_suggestion(tmp_path, args, message):
  result = _run("experiments.train_control", f"--workdir={tmp_path}", *args)
  assert result.returncode == 1
  assert _error_line(result).startswith(message)


def test_train_agent_unknown_key_is_one_line_with_a_suggestion(tmp_path):
  result = _run("experiments.train_agent", f"--workdir={tmp_path}", "--config.grpo.kl_bet=0.1")
  assert result.returncode == 1
  assert _error_line(result).startswith(
      "error: unknown config key 'grpo.kl_bet', did you mean 'kl_beta'?")


@pytest.mark.slow  # ~15 s alone, a minute on a busy 2-core machine
def test_train_control_smoke_writes_tensorboard_and_png(tmp_path):
  workdir = tmp_path / "run"
  result = _run("experiments.train_control", f"--workdir={workdir}",
                "--config=experiments/configs/control.py:smoke", "--config.num_seeds=1")
  assert result.returncode == 0, result.stderr[-2000:]
  assert "final rolling return per seed:" in result.stdout
  for name in ("config.json", "metrics.csv", "learning_curve.png", "summary.json"):
    assert (workdir / name).exists(), name
  with open(workdir / "learning_curve.png", "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  events = os.listdir(workdir / "tensorboard")
  assert any(e.startswith("events.out.tfevents") for e in events), events
