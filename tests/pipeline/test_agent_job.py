"""The main job end to end on the smoke config: it learns, resumes exactly, reports bad input."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from experiments.configs import calculator
from rlagents import checkpoint
from rlagents import guardrails
from rlagents import rewards
from rlagents import pipeline
from rlagents.metrics import read_csv


def _smoke_config(**grpo):
  values = calculator.get_config("smoke").to_dict()
  values["grpo"].update(grpo)
  return pipeline.config_from_dict(values)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("job") / "run")
  config = _smoke_config()
  report = pipeline.train_and_evaluate(config, workdir)
  return config, workdir, report


def _metric(workdir, name):
  rows = read_csv(os.path.join(workdir, "metrics.csv"))
  return {r["step"]: r["value"] for r in rows if r["name"] == name}


def test_smoke_job_writes_its_outputs(finished_run):
  _, workdir, report = finished_run
  for name in ("config.json", "report.json", "metrics.csv", "learning_curves.png",
               "audit/episodes.jsonl", "tokenizer/tokenizer.json"):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert os.listdir(os.path.join(workdir, "tensorboard"))
  for split in ("heldout", "heldout_ood", "calibration"):
    for policy in ("expert", "sft", "grpo"):
      entry = report["splits"][split][policy]
      assert 0.0 <= entry["success"] <= 1.0
      assert {"tool_call_validity", "mean_tool_calls", "redundant_calls"} <= set(entry)


def test_smoke_job_learns(finished_run):
  config, workdir, _ = finished_run
  nll = _metric(workdir, "sft/nll")
  assert nll[max(nll)] < 0.5 * nll[min(nll)]
  curve = _metric(workdir, "eval/heldout_success")
  sft_end = config.sft.num_steps
  # The SFT policy uses the tool and solves some tasks; GRPO raises held-out success on the
  # same tasks with the same sampling key (the final report's 64-task figures use other keys
  # and are too noisy at 16 GRPO steps to compare).
  assert curve[sft_end] > 0.1
  assert max(v for step, v in curve.items() if step > sft_end) > curve[sft_end] + 0.05


def test_audit_log_has_every_episode_with_reward_terms(finished_run):
  config, workdir, _ = finished_run
  with open(os.path.join(workdir, "audit", "episodes.jsonl")) as f:
    records = [json.loads(line) for line in f]
  grpo = [r for r in records if r["phase"] == "grpo"]
  assert len(grpo) == config.grpo.num_steps * config.grpo.prompts_per_step * config.grpo.group_size
  demos = [r for r in records if r["phase"] == "sft_demonstration"]
  assert len(demos) == config.sft.num_demonstrations
  record = grpo[-1]
  assert set(record["reward_terms"]) == set(rewards.TERMS)
  assert record["prompt"].endswith("=?") and record["actions"]


def _assert_same_metrics(expected_dir, actual_dir):
  def rows(d):
    return {(r["step"], r["name"]): r["value"] for r in read_csv(os.path.join(d, "metrics.csv"))
            if not r["name"].startswith("time/")}
  expected, actual = rows(expected_dir), rows(actual_dir)
  assert sorted(actual) == sorted(expected)
  for key, value in expected.items():
    np.testing.assert_allclose(actual[key], value, rtol=1e-4, atol=1e-6, err_msg=str(key))


def _assert_same_episodes(expected_dir, actual_dir, phases=("grpo", "curve_eval")):
  def records(d):
    path = os.path.join(d, "audit", "episodes.jsonl")
    guardrails.verify_audit_log(path)
    with open(path) as f:
      return [(r["step"], r["phase"], r["prompt"], r["actions"], r["reward"])
              for r in map(json.loads, f) if r["phase"] in phases]
  assert records(actual_dir) == records(expected_dir)


def _final_grpo_params(workdir, config):
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", "grpo"))
  step = ckpt.latest_step()
  assert step == config.grpo.num_steps
  return ckpt.restore(step)[0]["params"]


def test_resume_continues_from_the_saved_step_and_matches(finished_run, tmp_path):
  config, workdir, _ = finished_run
  resumed = str(tmp_path / "resumed")
  shutil.copytree(workdir, resumed)
  # Simulate a run killed after its first GRPO checkpoint: the newest step never got written.
  last = config.grpo.num_steps
  shutil.rmtree(os.path.join(resumed, "checkpoints", "grpo", str(last)))
  os.remove(os.path.join(resumed, "report.json"))
  report = pipeline.train_and_evaluate(config, resumed)
  saved_step = last - config.checkpoint_every
  assert report["resumed_from_step"] == config.sft.num_steps + saved_step
  # The metrics continue without a gap or a repeat.
  rows = read_csv(os.path.join(resumed, "metrics.csv"))
  pairs = [(r["step"], r["name"]) for r in rows]
  assert len(pairs) == len(set(pairs))
  resumed_steps = sorted(s for s, name in pairs if name == "grpo/loss")
  assert resumed_steps == sorted(_metric(workdir, "grpo/loss"))
  # Every metric row (timings aside) is the uninterrupted run's, before and after the resume.
  _assert_same_metrics(workdir, resumed)
  # The audit log holds each GRPO episode once, the same episodes, and its hash chain holds.
  _assert_same_episodes(workdir, resumed)
  # Data order, sampling keys and tool randomness depend on the step only, so the resumed run
  # ends with the same parameters as the uninterrupted one.
  original = _final_grpo_params(workdir, config)
  again = _final_grpo_params(resumed, config)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               original, again)


def _largest_file(directory):
  files = [os.path.join(root, f) for root, _, names in os.walk(directory) for f in names]
  return max(files, key=os.path.getsize)


def test_corrupt_newest_checkpoint_is_reported_and_the_previous_one_used(finished_run, tmp_path):
  config, workdir, _ = finished_run
  broken = str(tmp_path / "broken")
  shutil.copytree(workdir, broken)
  os.remove(os.path.join(broken, "report.json"))
  last = config.grpo.num_steps
  step_dir = os.path.join(broken, "checkpoints", "grpo", str(last))
  data_file = _largest_file(os.path.join(step_dir, "state"))
  with open(data_file, "r+b") as f:  # A disk filled up or a copy cut short.
    f.truncate(os.path.getsize(data_file) // 3)
  with pytest.warns(checkpoint.CheckpointWarning, match="falling back") as caught:
    report = pipeline.train_and_evaluate(config, broken)
  message = str(caught[0].message)
  assert step_dir in message and "corrupt or unreadable" in message and "\n" not in message
  saved_step = last - config.checkpoint_every
  assert report["resumed_from_step"] == config.sft.num_steps + saved_step
  # The corrupt step was set aside and written again by the resumed run, with the same values.
  assert os.path.isdir(os.path.join(broken, "checkpoints", "grpo", f"corrupt-{last}"))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               _final_grpo_params(workdir, config), _final_grpo_params(broken, config))
  rows = read_csv(os.path.join(broken, "metrics.csv"))
  assert len({(r["step"], r["name"]) for r in rows}) == len(rows)


def test_no_readable_checkpoint_is_a_one_line_error(finished_run, tmp_path):
  config, workdir, _ = finished_run
  broken = str(tmp_path / "broken")
  shutil.copytree(workdir, broken)
  grpo_dir = os.path.join(broken, "checkpoints", "grpo")
  for step in os.listdir(grpo_dir):
    os.remove(_largest_file(os.path.join(grpo_dir, step, "state")))
  with pytest.warns(checkpoint.CheckpointWarning):
    with pytest.raises(checkpoint.CheckpointError, match="no readable checkpoint in") as info:
      pipeline.train_and_evaluate(config, broken)
  assert "\n" not in str(info.value) and grpo_dir in str(info.value)
  # Nothing was moved or overwritten: the steps stay for inspection.
  assert sorted(os.listdir(grpo_dir)) == sorted(os.listdir(
      os.path.join(workdir, "checkpoints", "grpo")))


def test_a_different_config_on_the_same_workdir_is_refused(finished_run):
  _, workdir, _ = finished_run
  with pytest.raises(pipeline.JobError, match="different config .*grpo.kl_beta"):
    pipeline.train_and_evaluate(_smoke_config(kl_beta=0.5), workdir)


@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    dict(advantage_estimator="dr_grpo", aggregation="seq_sum_max_len", kl_estimator="k1"),
    dict(advantage_estimator="rloo", aggregation="seq_mean_token_mean", kl_estimator="k2"),
    dict(advantage_estimator="reinforce_pp", policy_loss="gspo", clip_low=3e-4, clip_high=4e-4,
         updates_per_batch=2),
], ids=["dr_grpo", "rloo", "reinforce_pp-gspo"])
def test_smoke_config_trains_with_each_loss_variant(finished_run, tmp_path, variant):
  config, workdir, _ = finished_run
  # Start from the finished run's SFT checkpoint; only the RL phase differs.
  run = str(tmp_path / "variant")
  shutil.copytree(os.path.join(workdir, "checkpoints", "sft"),
                  os.path.join(run, "checkpoints", "sft"))
  values = calculator.get_config("smoke").to_dict()
  values["grpo"].update(num_steps=4, **variant)
  values["eval"]["every_steps"] = 0
  variant_config = pipeline.config_from_dict(values)
  report = pipeline.train_and_evaluate(variant_config, run)
  losses = _metric(run, "grpo/loss")
  assert len(losses) == 1 and all(np.isfinite(v) for v in losses.values())
  sft = checkpoint.Checkpointer(os.path.join(run, "checkpoints", "sft"))
  sft_params = sft.restore(sft.latest_step())[0]["params"]
  trained = _final_grpo_params(run, variant_config)
  changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool(np.any(a != b)), sft_params, trained))
  assert all(changed)
  assert 0.0 <= report["splits"]["heldout"]["grpo"]["success"] <= 1.0


def test_proxy_drift_monitor_watches_every_evaluation_point(finished_run):
  config, workdir, report = finished_run
  train_reward = _metric(workdir, "train/reward_since_eval")
  calibration = _metric(workdir, "eval/calibration_success")
  alarms = _metric(workdir, "alarm/proxy_drift")
  points = sorted(train_reward)
  every = config.eval.every_steps
  assert points == [config.sft.num_steps + s for s in range(every, config.grpo.num_steps + 1,
                                                             every)]
  assert sorted(calibration) == points == sorted(alarms)
  # The logged points replayed through a monitor give the alarms the job recorded, also with
  # settings under which it must fire whenever the reward rose at all.
  for drift in (config.proxy_drift,
                rewards.ProxyDriftConfig(window=2, min_reward_rise=1e-6,
                                         max_calibration_gain=1.0)):
    monitor = rewards.ProxyDriftMonitor(drift)
    fired = [monitor.update(s, train_reward[s], calibration[s]) for s in points]
    if drift == config.proxy_drift:
      assert fired == [bool(alarms[s]) for s in points]
      assert report["proxy_drift"] == {"watched": True, "points": len(points),
                                       "alarm_steps": monitor.alarms}
    else:
      rose = train_reward[points[1]] - train_reward[points[0]] >= 1e-6
      assert fired[1] == rose
  # The honest run (the reward is the verified answer) raises no alarm.
  assert report["proxy_drift"]["alarm_steps"] == []


def test_diversity_penalty_is_off_by_default_and_subtracts_its_weight(finished_run):
  _, workdir, _ = finished_run
  with open(os.path.join(workdir, "audit", "episodes.jsonl")) as f:
    assert not any('"diversity"' in line for line in f)
  from rlagents.episodes import Action, Episode  # pylint: disable=g-import-not-at-top

  def episode(text):
    e = Episode(task=None)
    e.actions.append(Action(kind="answer", text=text))
    e.reward, e.reward_terms = 1.0, {}
    return e

  # Two groups of 3: (a, a, b) -> penalties 1/2, 1/2, 0; (c, d, e) -> 0, 0, 0.
  episodes = [episode(t) for t in ("a", "a", "b", "c", "d", "e")]
  pipeline.phases.grpo.apply_diversity_penalty(episodes, group_size=3, weight=0.4)
  np.testing.assert_allclose([e.reward for e in episodes], [0.8, 0.8, 1.0, 1.0, 1.0, 1.0])
  assert [e.reward_terms["diversity"] for e in episodes] == [0.5, 0.5, 0, 0, 0, 0]


def test_sft_on_successful_demonstrations_only(finished_run, tmp_path):
  config, workdir, _ = finished_run
  # Every demonstration is trained on by default; with `successful_only`, those that verified.
  assert _metric(workdir, "sft/demonstrations") == {0: config.sft.num_demonstrations}
  values = calculator.get_config("smoke").to_dict()
  values["sft"].update(num_steps=2, successful_only=True)
  values["grpo"].update(num_steps=1)
  values["eval"]["every_steps"] = 0
  run = str(tmp_path / "successful_only")
  pipeline.train_and_evaluate(pipeline.config_from_dict(values), run)
  with open(os.path.join(run, "audit", "episodes.jsonl")) as f:
    demos = [r for r in map(json.loads, f) if r["phase"] == "sft_demonstration"]
  verified = sum(r["reward_terms"]["correct_answer"] > 0 for r in demos)
  assert len(demos) == config.sft.num_demonstrations > verified > 0
  assert _metric(run, "sft/demonstrations") == {0: verified}
