"""experiments/compare_algorithms.py: the table from runs, and one method end to end at smoke size."""

import pytest

from experiments import compare_algorithms


def _run(method, seed, heldout, sft, seconds):
  return {"seed": seed, "method": method, "heldout_success": heldout, "ood_success": 0.1,
          "sft_heldout_success": sft, "sft_ood_success": 0.05, "gain": heldout - sft,
          "phase_seconds": seconds,
          "seconds_per_point": seconds / (100 * (heldout - sft)) if heldout > sft else None,
          "peak_rss_mib": 1000.0, "sampled_tokens": 16000, "trained_parameters": 401536,
          "steps": 25}


def test_table_reports_medians_with_ranges():
  runs = [_run("grpo", 0, 0.7, 0.5, 100.0), _run("grpo", 1, 0.9, 0.5, 120.0),
          _run("grpo", 2, 0.8, 0.5, 300.0), _run("dpo", 0, 0.4, 0.5, 50.0)]
  table = compare_algorithms.markdown_table(runs, ["grpo", "dpo"])
  lines = table.splitlines()
  assert lines[2].startswith("| sft (start) | 0.500 (0.500-0.500) |")
  # held-out median 0.8 of (0.7, 0.9, 0.8); gain +0.3; seconds per point 120 / 40 = 3.0 etc.
  assert lines[3].startswith("| grpo | 0.800 (0.700-0.900) | 0.100 (0.100-0.100) | "
                             "+0.300 (+0.200-+0.400) | 120 (100-300) | 5.0 (3.0-10.0) |")
  assert "| dpo | 0.400 | 0.100 | -0.100 | 50 | - |" in table  # no gain: no cost per point


def test_unknown_method_is_refused(tmp_path):
  with pytest.raises(ValueError, match="unknown method 'a2c'"):
    compare_algorithms.run_comparison(str(tmp_path), "smoke", [0], ["a2c"])


@pytest.mark.slow
def test_smoke_comparison_runs_end_to_end(tmp_path):
  # GRPO: the smoke SFT policy may not solve a single task, and DPO then has no pair to learn
  # from (a one-line error, tested in test_rlhf_job.py).
  result = compare_algorithms.run_comparison(str(tmp_path), "smoke", [0], ["grpo"])
  (run,) = result["runs"]
  assert run["method"] == "grpo" and run["steps"] >= 1
  assert run["sampled_tokens"] >= 1500  # the smoke budget
  assert run["peak_rss_mib"] > 0 and run["trained_parameters"] > 0
  assert "| grpo |" in result["table"]
