"""Self-play (`algorithm='grpo_selfplay'`) in the job: its config, a smoke run whose proposals
grow harder, and an exact resume mid-phase.

The smoke run is `calculator.py:selfplay_smoke` (clean demonstrator, two-operand training
problems, 40 self-play steps of 8 proposals); the resume test shortens SFT to 120 steps (enough
for the solver to solve some proposals sometimes, so the frontier of replayed proposals fills)
and self-play to 10 steps with a checkpoint every 5 (exactness does not need a good policy).
"""

import os
import shutil

import jax
import numpy as np
import pytest

from experiments import configs
from experiments.configs import calculator
from rlagents import checkpoint
from rlagents import guardrails
from rlagents import pipeline
from rlagents.metrics import read_csv
from rlagents.pipeline import _replay
from rlagents.pipeline import _report
from rlagents.tasks import keydoor as keydoor_tasks


def _config(variant="selfplay_smoke", **overrides):
  return pipeline.config_from_dict(configs.with_overrides(
      calculator.get_config(variant).to_dict(), overrides))


def test_selfplay_variants_build_and_name_the_phase():
  assert "grpo_selfplay" in pipeline.phases.algorithms()
  for variant in ("selfplay", "selfplay_smoke"):
    config = _config(variant)
    assert config.algorithm == "grpo_selfplay"
    assert pipeline.phases.rl_phase_name(config) == "grpo_selfplay"


@pytest.mark.parametrize("overrides,message", [
    ({"selfplay.proposed_fraction": 1.5}, "selfplay.proposed_fraction must be in"),
    ({"selfplay.proposed_fraction": 0.01}, "selfplay.proposed_fraction=0.01 of "
                                           "grpo.prompts_per_step=8 rounds to no proposal"),
    ({"selfplay.learnability": "entropy"}, "selfplay.learnability must be one of"),
    ({"selfplay.oversample": 0}, "selfplay.oversample must be an int >= 1"),
    ({"selfplay.learnability_peak": 0.0}, "selfplay.learnability_peak must be a number in"),
    ({"selfplay.learnability_peak": 1.0}, "selfplay.learnability_peak must be a number in"),
    ({"selfplay.proposer_demonstrations": -1}, "selfplay.proposer_demonstrations must be"),
    ({"selfplay.proposer_demonstrations": 0}, "selfplay.proposer_demonstrations > 0"),
    ({"selfplay.composed_demonstrations": 1.5}, "selfplay.composed_demonstrations must be in"),
    ({"selfplay.solver_demonstrations": -1}, "selfplay.solver_demonstrations must be an int"),
    ({"selfplay.consolidation_steps": -1}, "selfplay.consolidation_steps must be an int >= 0"),
    ({"selfplay.consolidation_fraction": 1.5}, "selfplay.consolidation_fraction must be in"),
    ({"selfplay.consolidation_steps": 40}, "selfplay.consolidation_steps=40 leave no "
                                           "self-play step of grpo.num_steps=40"),
    ({"selfplay.warmup_steps": -1}, "selfplay.warmup_steps must be an int >= 0"),
    ({"selfplay.warmup_steps": 30, "selfplay.consolidation_steps": 10},
     "selfplay.warmup_steps=30 and selfplay.consolidation_steps=10 leave no self-play step"),
    ({"selfplay.proposer_weight": 0.0}, "selfplay.proposer_weight must be a finite number > 0"),
    ({"selfplay.proposer_weight": -2.0}, "selfplay.proposer_weight must be a finite number > 0"),
    ({"selfplay.proposer_kl_weight": -1.0}, "selfplay.proposer_kl_weight must be a finite"),
    ({"selfplay.proposer_kl_weight": 10.0, "grpo.kl_beta": 0.0},
     "selfplay.proposer_kl_weight=10.0 scales the KL term, which grpo.kl_beta=0 turns off"),
    ({"selfplay.proposer_kl_fade_steps": -1}, "selfplay.proposer_kl_fade_steps must be"),
    ({"selfplay.replay_fraction": 1.0}, "selfplay.replay_fraction must be in"),
    ({"selfplay.replay_capacity": 0}, "selfplay.replay_capacity must be an int >= 1"),
    ({"selfplay.replay_fraction": 0.95}, "selfplay.replay_fraction=0.95 of "
                                         "grpo.prompts_per_step=8 leaves no prompt"),
    ({"diversity_weight": 0.1}, "does not support diversity_weight"),
    ({"rollout_mode": "jit"}, "rollout_mode='jit' runs GRPO steps in one program"),
])
def test_bad_settings_are_refused_in_one_line(overrides, message):
  with pytest.raises(pipeline.ConfigError, match=message.replace("(", r"\(")) as error:
    _config(**overrides)
  assert "\n" not in str(error.value)


def test_consolidation_steps_change_the_share_of_proposals_at_the_end_only():
  from rlagents.pipeline.phases import selfplay  # pylint: disable=g-import-not-at-top
  config = _config(**{"selfplay.proposed_fraction": 1.0, "grpo.num_steps": 40,
                      "selfplay.consolidation_steps": 3, "selfplay.consolidation_fraction": 0.25})
  assert [selfplay.num_proposals(config, step) for step in range(40)] == [8] * 37 + [2] * 3
  assert selfplay.num_proposals(config) == 8
  plain = _config(**{"selfplay.proposed_fraction": 1.0})
  assert [selfplay.num_proposals(plain, step) for step in range(40)] == [8] * 40


def test_proposer_weight_scales_the_proposers_advantages_only():
  from rlagents import losses  # pylint: disable=g-import-not-at-top
  from rlagents.pipeline.phases import selfplay  # pylint: disable=g-import-not-at-top
  # Solver group 0 (rewards 1, 0) and group 1 (0.5, 0.5); the step's proposals are group 2.
  rewards = np.array([1.0, 0.0, 0.5, 0.5, 1.0, 0.0, 0.0, 0.0], np.float32)
  groups = np.array([0, 0, 1, 1, 2, 2, 2, 2], np.int32)
  roles = np.array([0, 0, 0, 0, 1, 1, 1, 1], np.int32)
  def fn(r, g, ro):
    return losses.role_conditioned_advantages(r, g, ro, num_groups=3, epsilon=0.0)
  # By hand: solver centred (0.5, -0.5, 0, 0), rms over its 4 episodes sqrt(0.125);
  # proposer centred (0.75, -0.25, -0.25, -0.25), rms sqrt(0.1875).
  solver = np.array([0.5, -0.5, 0.0, 0.0]) / np.sqrt(0.125)
  proposer = np.array([0.75, -0.25, -0.25, -0.25]) / np.sqrt(0.1875)
  np.testing.assert_allclose(
      selfplay.weighted_advantages(fn, rewards, groups, roles, proposer_weight=1.0),
      np.concatenate([solver, proposer]), rtol=1e-6)
  np.testing.assert_allclose(
      selfplay.weighted_advantages(fn, rewards, groups, roles, proposer_weight=3.0),
      np.concatenate([solver, 3.0 * proposer]), rtol=1e-6)


def test_replayed_prompts_come_out_of_the_proposals():
  from rlagents.pipeline.phases import selfplay  # pylint: disable=g-import-not-at-top
  config = _config(**{"selfplay.proposed_fraction": 1.0, "selfplay.replay_fraction": 0.25,
                      "grpo.num_steps": 40, "selfplay.consolidation_steps": 3,
                      "selfplay.consolidation_fraction": 0.5})
  assert selfplay.num_replays(config) == 2
  assert selfplay.num_proposals(config, 0, replayed=2) == 6   # 8 prompts: 6 written, 2 replayed
  assert selfplay.num_proposals(config, 0, replayed=0) == 8   # an empty frontier replays none
  assert selfplay.num_proposals(config, 39, replayed=2) == 4  # consolidation: 4 of 8 anyway


def test_warmup_steps_train_on_training_tasks_only():
  from rlagents.pipeline.phases import selfplay  # pylint: disable=g-import-not-at-top
  config = _config(**{"selfplay.proposed_fraction": 1.0, "grpo.num_steps": 40,
                      "selfplay.warmup_steps": 5, "selfplay.consolidation_steps": 3,
                      "selfplay.consolidation_fraction": 0.5})
  assert [selfplay.num_proposals(config, step) for step in (0, 4, 5, 36, 37, 39)] == [
      0, 0, 8, 8, 4, 4]
  assert selfplay.num_proposals(config) == 8   # outside any step: the self-play steps' count


def test_the_proposer_kl_weight_fades_to_one():
  from rlagents.pipeline.phases import selfplay  # pylint: disable=g-import-not-at-top
  constant = _config(**{"selfplay.proposer_kl_weight": 50.0})
  assert [selfplay.proposer_kl_weight(constant, t) for t in (0, 39)] == [50.0, 50.0]
  fading = _config(**{"selfplay.proposer_kl_weight": 50.0, "selfplay.proposer_kl_fade_steps": 20})
  # 1 + 49 * (1 - t / 20): 50 at the start, 25.5 half-way, 1 from step 20 on.
  assert [selfplay.proposer_kl_weight(fading, t) for t in (0, 10, 20, 39)] == [
      50.0, 25.5, 1.0, 1.0]


def test_frontier_keeps_partly_solved_proposals_and_replays_by_learnability():
  from rlagents.pipeline.phases import selfplay  # pylint: disable=g-import-not-at-top
  frontier = selfplay.Frontier(capacity=3)
  frontier.update(["1+1", "2*3", "9-4", "7+7"], [1.0, 0.5, 0.0, 0.25], step=0)
  # Solved always (1+1) or never (9-4): not at the frontier. Scores are 4p(1-p).
  assert frontier.entries == {"2*3": (1.0, 0), "7+7": (0.75, 0)}
  frontier.update(["2*3", "5+6", "8*8"], [1.0, 0.5, 0.125], step=1)
  assert set(frontier.entries) == {"7+7", "5+6", "8*8"}   # 2*3 now always solved: it leaves
  frontier.update(["4-1"], [0.5], step=2)                 # over capacity: 8*8 (0.4375) leaves
  assert set(frontier.entries) == {"7+7", "5+6", "4-1"}
  # Draws are distinct, as many as asked or held, in proportion to the score.
  rng = np.random.default_rng(0)
  assert sorted(frontier.sample(rng, 5)) == ["4-1", "5+6", "7+7"]
  counts = {t: 0 for t in frontier.entries}
  for _ in range(4000):
    counts[frontier.sample(rng, 1)[0]] += 1
  np.testing.assert_allclose([counts["7+7"] / 4000, counts["5+6"] / 4000],
                             [0.75 / 2.75, 1.0 / 2.75], atol=0.03)
  # Its state restores it exactly.
  restored = selfplay.Frontier(capacity=3)
  restored.load(frontier.state())
  assert restored.entries == frontier.entries
  assert restored.sample(np.random.default_rng(7), 2) == frontier.sample(
      np.random.default_rng(7), 2)


def test_difficulty_selector_prefers_learnable_buckets_and_estimates_the_rest():
  from rlagents.pipeline.phases import selfplay  # pylint: disable=g-import-not-at-top
  selector = selfplay.DifficultySelector(keys=("operands",), rate=0.5)
  two, four = (selector.bucket({"operands": n, "length": 9.0}) for n in (2.0, 4.0))
  assert two != four and selector.bucket({"operands": 2.0, "length": 3.0}) == two
  with pytest.raises(ValueError, match="select_by names \\['operands'\\]"):
    selector.bucket({"length": 3.0})
  assert selector.estimate(four) == 1.0                      # never solved: tried first
  selector.update([two, two, four], [0.2, 0.6, 0.8])
  # First value, then a running mean with rate 0.5: 0.2 -> 0.2 + 0.5 * (0.6 - 0.2) = 0.4.
  assert selector.estimate(two) == pytest.approx(0.4)
  assert selector.estimate(four) == pytest.approx(0.8)
  assert selector.buckets[two][1] == 2
  # Draws are distinct and in proportion to score + floor: 0.45 against 0.85.
  rng = np.random.default_rng(0)
  assert sorted(selector.select(rng, [two, four, two], 5)) == [0, 1, 2]
  picks = [selector.select(rng, [two, four], 1)[0] for _ in range(4000)]
  assert np.mean(picks) == pytest.approx(0.85 / 1.3, abs=0.03)
  restored = selfplay.DifficultySelector(keys=("operands",), rate=0.5)
  restored.load(selector.state())
  assert restored.buckets == selector.buckets
  # With no keys, every figure makes the bucket.
  every = selfplay.DifficultySelector()
  assert every.bucket({"operands": 2.0, "length": 3.0}) != every.bucket(
      {"operands": 2.0, "length": 5.0})


def _proposals(workdir):
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  return [r for r in records if r["phase"] == "grpo_selfplay" and r.get("role") == "proposer"]


def _mean_operands(records):
  return float(np.mean([r["reward_terms"]["operands"] for r in records
                        if r["verdict"] == "accepted"]))


@pytest.mark.slow  # SFT 250 steps, 40 self-play steps: a few minutes on 2 cores.
def test_smoke_run_proposals_grow_harder_and_evaluation_tasks_stay_out(tmp_path):
  workdir = str(tmp_path / "run")
  report = pipeline.train_and_evaluate(_config(), workdir)
  proposals = _proposals(workdir)
  steps = sorted({r["step"] for r in proposals})
  assert len(steps) == 40 and len(proposals) == 40 * 8
  first = [r for r in proposals if r["step"] in steps[:10]]
  last = [r for r in proposals if r["step"] in steps[-10:]]
  # No schedule asks for longer problems: learnability pays for problems the solver solves
  # sometimes, and the proposer moves from lone numbers (which this solver, never trained on
  # one, seldom solves: p near 0 earns nothing) to two and three operands (measured: 1.59 in
  # the first 10 steps, 2.02 in the last 10).
  assert _mean_operands(last) > _mean_operands(first) + 0.2, (
      _mean_operands(first), _mean_operands(last))
  counts = report["after_sft"]["selfplay"]
  assert counts["proposals"]["eval_split"] > 0  # the check ran and discarded some
  assert sum(counts["eval_split_discards"].values()) == counts["proposals"]["eval_split"]
  # No task of an evaluation split was trained on: every solver task is a training task or an
  # accepted proposal, and no accepted proposal is an evaluation task.
  suite_tasks = {}
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  for record in records:
    if record["phase"] == "final_eval":
      suite_tasks.setdefault(record["split"], set()).add(record["task"]["expression"])
  trained = {r["task"]["expression"] for r in records
             if r["phase"] == "grpo_selfplay" and r.get("role") != "proposer"}
  assert trained and not trained & (suite_tasks["heldout"] | suite_tasks["heldout_ood"]
                                     | suite_tasks["calibration"])
  names = {row["name"] for row in read_csv(os.path.join(workdir, "metrics.csv"))}
  assert {"selfplay/proposal_operands", "selfplay/proposed_success",
          "selfplay/rejected_eval_split", "eval/heldout_ood_success"} <= names
  assert os.path.getsize(os.path.join(workdir, "selfplay.png")) > 0
  # The solver episodes of proposed tasks replay with the real tool's answers.
  replayed, problems = _replay.replay_workdir(workdir)
  assert replayed > 0 and not problems, problems[:3]


# ---- exact resume ----

# The last 3 steps consolidate on training tasks alone (no proposer episodes), after the stop;
# a quarter of the prompts replay frontier proposals (the frontier travels with the checkpoint).
RESUME = {"sft.num_steps": 120, "grpo.num_steps": 10, "checkpoint_every": 5,
          "eval.every_steps": 0, "log_every": 4, "selfplay.consolidation_steps": 3,
          "selfplay.replay_fraction": 0.25, "selfplay.oversample": 2,
          "selfplay.solver_demonstrations": 40}


def _run_without_final_report(config, workdir):
  original = _report.final_report
  _report.final_report = lambda job, *_: {"splits": {"heldout": {"expert": {"success": 0.}}}}
  try:
    return pipeline.train_and_evaluate(config, workdir)
  finally:
    _report.final_report = original


class _Stop(Exception):
  pass


def _params(workdir, step=10):
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints", "grpo_selfplay")) as ckpt:
    assert ckpt.latest_step() == step
    return ckpt.restore(step)[0]["params"]


@pytest.mark.slow  # SFT 120 steps, then 10 self-play steps three times: minutes on 2 cores.
def test_stop_mid_phase_and_resume_continues_exactly(tmp_path):
  config = _config(**RESUME)
  sft_dir = str(tmp_path / "sft")
  _run_without_final_report(_config(**{**RESUME, "grpo.num_steps": 0}), sft_dir)
  # SFT demonstrated the expert on the train split and on 40 smaller proposals besides.
  demos = [r for r in guardrails.read_audit_log(os.path.join(sft_dir, "audit", "episodes.jsonl"))
           if r["phase"] == "sft_demonstration" and r.get("role") != "proposer"]
  assert len(demos) == config.sft.num_demonstrations + 40
  assert sum(r["task_id"].startswith("proposed-") for r in demos) == 40

  def start(name):
    workdir = str(tmp_path / name)
    for part in ("data", os.path.join("checkpoints", "sft")):
      shutil.copytree(os.path.join(sft_dir, part), os.path.join(workdir, part))
    return workdir

  straight = start("straight")
  straight_report = _run_without_final_report(config, straight)
  resumed = start("resumed")
  save = checkpoint.Checkpointer.save

  def save_then_stop(self, step, state, metadata):
    save(self, step, state, metadata)
    if metadata["phase"] == "grpo_selfplay" and step == 5:
      raise _Stop

  checkpoint.Checkpointer.save = save_then_stop
  try:
    with pytest.raises(_Stop):
      _run_without_final_report(config, resumed)
  finally:
    checkpoint.Checkpointer.save = save
  with checkpoint.Checkpointer(os.path.join(resumed, "checkpoints", "grpo_selfplay")) as ckpt:
    metadata = ckpt.restore(5)[1]
  seen_at_5 = set(metadata["selfplay_checker"]["seen"])
  assert seen_at_5  # the checker's memory of proposals travels with the checkpoint
  assert metadata["selfplay_frontier"]["entries"]  # and the frontier to replay from
  assert metadata["selfplay_selector"]["buckets"]  # and the difficulty buckets' scores
  report = _run_without_final_report(config, resumed)
  assert report["resumed_from_step"] == 120 + 5
  jax.tree.map(np.testing.assert_array_equal, _params(straight), _params(resumed))
  rows = {}
  for d in (straight, resumed):
    rows[d] = sorted((r["step"], r["name"], r["value"])
                     for r in read_csv(os.path.join(d, "metrics.csv"))
                     if not r["name"].startswith("time/"))
  assert rows[resumed] == rows[straight]
  keep = lambda r: (r["step"], r["task_id"], r["answer"], r.get("verdict"), r["reward"])
  records = {d: [keep(r) for r in guardrails.read_audit_log(
      os.path.join(d, "audit", "episodes.jsonl")) if r["phase"] == "grpo_selfplay"]
             for d in (straight, resumed)}
  assert records[resumed] == records[straight]
  proposer_steps = sorted({r["step"] for r in _proposals(straight)})
  assert proposer_steps == [120 + s for s in range(1, 8)]  # none in the 3 consolidation steps
  replays = [r["value"] for r in read_csv(os.path.join(straight, "metrics.csv"))
             if r["name"] == "selfplay/replayed"]
  assert replays and max(replays) == 2  # 2 of the 8 prompts, once the frontier held some
  # Twice the proposals were written; accepted ones beyond the prompts were not solved.
  assert any(r["verdict"] == "unselected" for r in _proposals(straight))
  # The checker's counts (duplicates of proposals made before the stop included) agree.
  assert report["after_sft"]["selfplay"] == straight_report["after_sft"]["selfplay"]


def test_a_suite_without_a_proposal_grammar_stops_before_training(tmp_path):
  from experiments.configs import codefix  # pylint: disable=g-import-not-at-top
  config = pipeline.config_from_dict(configs.with_overrides(
      codefix.get_config("smoke").to_dict(), {"algorithm": "grpo_selfplay"}))
  with pytest.raises(pipeline.JobError, match="task suite 'bugfix' gives no proposal grammar"):
    pipeline.train_and_evaluate(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run" / "checkpoints" / "sft" / "1")


def test_composed_proposer_examples_are_larger_and_never_evaluation_tasks(tmp_path):
  import dataclasses  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top
  from rlagents.pipeline import _job  # pylint: disable=g-import-not-at-top
  config = _config(**{"selfplay.proposer_demonstrations": 200,
                      "selfplay.composed_demonstrations": 0.5})
  suite = _job.load_suite(config, str(tmp_path))
  phase = pipeline.phases.get_phase("grpo_selfplay")

  def operands(episodes):
    return [len(e.answer.replace("*", "+").replace("-", "+").split("+")) for e in episodes]

  episodes = phase.warm_start_demonstrations(types.SimpleNamespace(config=config, suite=suite),
                                             np.random.default_rng(0))
  counts = operands(episodes)
  trained = config.tasks.num_operands
  assert len(episodes) == 200
  assert sum(c > trained for c in counts) == 100
  assert max(counts) <= 18 // config.tasks.ood_max_digits

  # A composition that writes an evaluation task (here the first heldout_ood one) is dropped.
  leaked = suite.splits["heldout_ood"][0].expression
  grammar = dataclasses.replace(suite.proposals, compose=lambda first, second, rng: leaked)
  job = types.SimpleNamespace(config=config, suite=dataclasses.replace(suite, proposals=grammar))
  episodes = phase.warm_start_demonstrations(job, np.random.default_rng(0))
  assert len(episodes) == 100 and leaked not in {e.answer for e in episodes}
  assert max(operands(episodes)) <= trained

  # Without a composition the setting is refused by name.
  job.suite = dataclasses.replace(suite, proposals=dataclasses.replace(grammar, compose=None))
  with pytest.raises(pipeline.JobError, match="gives no composition"):
    phase.warm_start_demonstrations(job, np.random.default_rng(0))


def test_solver_examples_are_smaller_training_problems_and_never_evaluation_tasks(tmp_path):
  import dataclasses  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top
  from rlagents.pipeline import _job  # pylint: disable=g-import-not-at-top
  config = _config("selfplay", **{"selfplay.solver_demonstrations": 300})
  suite = _job.load_suite(config, str(tmp_path))
  phase = pipeline.phases.get_phase("grpo_selfplay")
  job = types.SimpleNamespace(config=config, suite=suite)
  none = _config("selfplay", **{"selfplay.solver_demonstrations": 0})
  assert phase.warm_start_tasks(types.SimpleNamespace(config=none, suite=suite),
                                np.random.default_rng(0)) == []

  tasks = phase.warm_start_tasks(job, np.random.default_rng(0))
  assert len(tasks) == 300
  counts = {n: sum(t.num_operands == n for t in tasks) for n in range(1, 4)}
  assert sum(counts.values()) == 300 and min(counts.values()) >= 60, counts
  train = {t.expression for t in suite.splits["train"]}
  for task in tasks:  # the real calculator's answer, and a cut of a training expression
    assert task.answer == int(eval(task.expression))  # pylint: disable=eval-used
    assert any(e.startswith(task.expression) for e in train)
  evaluation_keys = {t.expression for split in suite.eval_splits for t in suite.splits[split]}
  assert not evaluation_keys & {t.expression for t in tasks}

  # An example that is an evaluation task is dropped, not demonstrated.
  leaked = suite.splits["heldout"][0].expression
  grammar = dataclasses.replace(
      suite.proposals, demonstrations=lambda tasks, rng: [leaked] + ["12+3"] * (len(tasks) - 1))
  job = types.SimpleNamespace(config=config, suite=dataclasses.replace(suite, proposals=grammar))
  tasks = phase.warm_start_tasks(job, np.random.default_rng(0))
  assert [t.expression for t in tasks] == ["12+3"] * 299


@pytest.mark.slow  # the key-door smoke job (SFT 60 steps, 4 self-play steps): ~1.5 min on 2 cores.
def test_selfplay_runs_on_the_key_door_world_through_its_grammar(tmp_path):
  from experiments.configs import keydoor  # pylint: disable=g-import-not-at-top
  config = pipeline.config_from_dict(configs.with_overrides(
      keydoor.get_config("smoke").to_dict(),
      {"algorithm": "grpo_selfplay", "selfplay.proposer_demonstrations": 200,
       "selfplay.composed_demonstrations": 0.5, "selfplay.solver_demonstrations": 50}))
  workdir = str(tmp_path / "run")
  report = pipeline.train_and_evaluate(config, workdir)
  records = guardrails.read_audit_log(os.path.join(workdir, "audit", "episodes.jsonl"))
  demos = [r for r in records if r["phase"] == "sft_demonstration"]
  examples = [r["answer"] for r in demos if r.get("role") == "proposer"]
  # The proposer's examples are layouts the grammar accepts (those over max_calls=9 or in an
  # evaluation split dropped), about half of them larger worlds.
  grammar = keydoor_tasks.proposal_grammar(config.keydoor)
  areas = [grammar.difficulty(grammar.to_task(text))["area"] for text in examples]
  assert len(examples) >= 150 and sum(a > 6 * 4 for a in areas) >= 0.3 * len(examples)
  assert sum(r["task_id"].startswith("proposed-") for r in demos
             if r.get("role") != "proposer") == 50
  proposals = _proposals(workdir)
  assert len(proposals) == 4 * 2 and all(r["verdict"] for r in proposals)
  counts = report["after_sft"]["selfplay"]["proposals"]
  assert sum(counts.values()) == len(proposals)
