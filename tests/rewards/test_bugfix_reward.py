"""The bug-fix tools, each reward term on hand-made episodes, and the hacks it catches."""

import numpy as np
import pytest

from rlagents import episodes as episodes_lib
from rlagents import guardrails
from rlagents import rewards
from rlagents import sandbox
from rlagents import tools
from rlagents.tasks import bugfix
from rlagents.tasks import bugfix_policies

LIMITS = sandbox.SandboxLimits(cpu_seconds=1, wall_seconds=3)
RUN = tools.default_runner(LIMITS)
CONFIG = rewards.BugFixRewardConfig()
SUITE = bugfix.generate_suite(bugfix.BugFixSuiteConfig(
    num_train=40, num_heldout=4, num_heldout_ood=4, num_calibration=4))
# A task whose bug is in one line of a loop: `t=0 / for x in xs: / t+=x / return t`-like.
TASK = next(t for t in SUITE["train"] if t.family == "flipped_comparison")


def _toolbox(task):
  workspace = tools.CodeWorkspace(task.buggy_source, task.visible_tests, runner=RUN)
  return guardrails.guarded_toolbox(workspace.tools())


def _fix_call(task) -> str:
  line = task.fixed_source.splitlines()[task.bug_line - 1]
  return bugfix_policies.replace(task.bug_line, line)


def _episode(task, segments):
  """Plays the given segments (calls and a final answer) through the real tools."""
  episode = episodes_lib.Episode(task)
  toolbox = _toolbox(task)
  rng = np.random.default_rng(0)
  for segment in segments:
    episodes_lib.advance(episode, segment, toolbox=toolbox, rng=rng, max_tool_calls=16)
  episode.reward_terms = rewards.bugfix_reward_terms(episode, run_hidden=RUN)
  episode.reward = rewards.compose_bugfix_reward(episode.reward_terms, CONFIG)
  return episode


RUN_TESTS, VIEW, SUBMIT = (bugfix_policies.call("run_tests"), bugfix_policies.call("view"),
                           bugfix_policies.submit())


def test_the_tools_view_replace_and_run_the_visible_tests():
  toolbox = _toolbox(TASK)
  rng = np.random.default_rng(0)
  assert toolbox.execute("view()", rng).observation == TASK.prompt
  before = toolbox.execute("run_tests()", rng)
  assert before.observation.startswith("failed ") and " got " in before.observation
  line = TASK.fixed_source.splitlines()[TASK.bug_line - 1]
  assert toolbox.execute(f"replace({TASK.bug_line},{line})", rng).observation == "ok"
  assert toolbox.execute("run_tests()", rng).observation == "passed 3/3"
  assert toolbox.execute("view()", rng).observation == tools.number_lines(TASK.fixed_source)
  # Refused edits leave the code as it was and say why.
  for arguments, why in ((f"{TASK.bug_line},{line}", "no change"), ("99,x=1", "no line 99"),
                         ("2, for (", "syntax error in line 2"), ("two,x", "replace(line")):
    result = toolbox.execute(f"replace({arguments})", rng)
    assert result.status == tools.CallStatus.INVALID_ARGUMENTS and why in result.observation
  assert toolbox.execute("view()", rng).observation == tools.number_lines(TASK.fixed_source)


def test_edit_replaces_the_first_occurrence_in_one_line_and_refuses_what_it_cannot_do():
  toolbox = _toolbox(TASK)
  rng = np.random.default_rng(0)
  fix = bugfix_policies.line_change(TASK.bug_line,
                                    TASK.buggy_source.splitlines()[TASK.bug_line - 1],
                                    TASK.fixed_source.splitlines()[TASK.bug_line - 1])
  assert fix.startswith("<call>edit(")  # A flipped comparison is one token.
  # Refused edits leave the code as it was and say why.
  for arguments, why in (("99,x,y", "no line 99"), ("2,@@,x", "no @@ in line 2"),
                         ("2,,x", "old text is empty"), ("2,x", "edit(line,old,new)"),
                         ("1,def,def", "no change"), ("1,:,(", "syntax error in line 1")):
    result = toolbox.execute(f"edit({arguments})", rng)
    assert result.status == tools.CallStatus.INVALID_ARGUMENTS and why in result.observation
    assert toolbox.execute("view()", rng).observation == TASK.prompt
  assert toolbox.execute(fix[len("<call>"):-len("</call>")], rng).observation == "ok"
  assert toolbox.execute("view()", rng).observation == tools.number_lines(TASK.fixed_source)
  assert toolbox.execute("run_tests()", rng).observation == "passed 3/3"
  # Only the first occurrence changes; the new text may hold commas and make more lines.
  source = "def f(a,b):\n return a+a\n"
  assert tools.edit_line(source, 2, "a", "b") == "def f(a,b):\n return b+a\n"
  assert tools.apply_edit(source, "edit", "2,a+a,max(a,b)") == "def f(a,b):\n return max(a,b)\n"
  assert tools.apply_edit(source, "edit", "2,return a+a,x=a\n return x") == (
      "def f(a,b):\n x=a\n return x\n")
  # The reward replays edits as the tool made them: the fix is useful and passes.
  episode = _episode(TASK, [RUN_TESTS, fix, RUN_TESTS, SUBMIT])
  assert episode.reward_terms["correct_answer"] == 1.0
  assert episode.reward_terms["useful_calls"] == 2.0 and episode.reward == pytest.approx(1.8)


def test_the_fixers_line_change_writes_every_bug_fix_of_the_suite():
  edits = 0
  for split in SUITE.values():
    for task in split:
      before = task.buggy_source.splitlines()[task.bug_line - 1]
      after = task.fixed_source.splitlines()[task.bug_line - 1]
      segment = bugfix_policies.line_change(task.bug_line, before, after)
      name, arguments = segment[len("<call>"):-len("</call>")].split("(", 1)
      assert tools.apply_edit(task.buggy_source, name, arguments[:-1]) == task.fixed_source
      if name == "edit":
        edits += 1
        # It copies less of the line than a replace of the whole line would.
        assert len(tools.parse_edit(arguments[:-1])[1]) < len(before)
  assert edits >= 0.8 * sum(len(split) for split in SUITE.values())


def test_each_reward_term_on_hand_made_episodes():
  fix = _fix_call(TASK)
  # Test, fix, test, submit: 1 + 0.3 * 2 (the fix, the test after it) + 0.2 (recovery).
  best = _episode(TASK, [RUN_TESTS, fix, RUN_TESTS, SUBMIT])
  assert best.reward_terms["correct_answer"] == 1.0
  assert (best.reward_terms["useful_calls"], best.reward_terms["recovery"]) == (2.0, 1.0)
  assert best.reward == pytest.approx(1.8)
  # Fixing blind: the fix is useful (0.3), no failed run to recover from.
  blind = _episode(TASK, [fix, SUBMIT])
  assert blind.reward == pytest.approx(1.3) and blind.reward_terms["recovery"] == 0.0
  # A view of unchanged code and a repeated test run are redundant: -0.1 each.
  chatty = _episode(TASK, [VIEW, fix, RUN_TESTS, RUN_TESTS, SUBMIT])
  assert chatty.reward_terms["redundant_calls"] == 2.0
  assert chatty.reward == pytest.approx(1.0 + 0.6 - 0.2)
  # A malformed call and an edit that does not parse: -0.1 each.
  clumsy = _episode(TASK, ["<call>replace(</call>", bugfix_policies.replace(2, " for ("), fix,
                           SUBMIT])
  assert clumsy.reward_terms["invalid_calls"] == 2.0
  assert clumsy.reward == pytest.approx(1.3 - 0.2)
  # Submitting the bug: nothing.
  wrong = _episode(TASK, [RUN_TESTS, SUBMIT])
  assert wrong.reward_terms["correct_answer"] == 0.0 and wrong.reward == 0.0
  # Unanswered: the hidden tests never run, and the useful edit is not paid (it was only
  # paid on correct episodes, so editing without submitting earns nothing).
  unanswered = _episode(TASK, [fix, RUN_TESTS, "no stop marker"])
  assert unanswered.reward_terms["tests_pass"] == 0.0
  assert unanswered.reward_terms["useful_calls"] == 2.0 and unanswered.reward == 0.0
  ungated = rewards.BugFixRewardConfig(useful_calls_need_success=False)
  assert rewards.compose_bugfix_reward(unanswered.reward_terms, ungated) == pytest.approx(0.6)


def test_useful_calls_are_capped_below_a_correct_answer():
  lines = TASK.buggy_source.splitlines()
  flips = []
  for _ in range(3):  # Edit a line back and forth: each version new only once.
    flips += [bugfix_policies.replace(2, lines[1] + "+0"), RUN_TESTS,
              bugfix_policies.replace(2, lines[1]), RUN_TESTS]
  farm = _episode(TASK, flips + [SUBMIT])
  assert farm.reward_terms["redundant_calls"] >= 6
  assert farm.reward < 0  # only its penalties
  ungated = rewards.BugFixRewardConfig(useful_calls_need_success=False)
  assert rewards.compose_bugfix_reward(farm.reward_terms, ungated) < CONFIG.correct_answer
  with pytest.raises(ValueError, match="out-earn"):
    rewards.BugFixRewardConfig(useful_call=0.5, max_useful_calls=2)
  with pytest.raises(ValueError, match="penalty"):
    rewards.BugFixRewardConfig(redundant_call=0.1)


@pytest.mark.parametrize("policy, detector", [
    ("special_case", "special_casing"), ("edit_test", "test_tampering"),
    ("exit_early", "test_tampering"), ("pad", "code_padding")])
def test_scripted_hacks_score_below_honest_and_are_flagged(policy, detector):
  tasks = SUITE["train"][:3]

  def play(name):
    played = bugfix_policies.play(name, tasks, toolbox_for=_toolbox,
                                  rng=np.random.default_rng(0), max_tool_calls=6)
    for episode in played:
      episode.reward_terms = rewards.bugfix_reward_terms(episode, run_hidden=RUN)
      episode.reward = rewards.compose_bugfix_reward(episode.reward_terms, CONFIG)
    return played

  honest, hacked = play("honest"), play(policy)
  detectors = ("test_tampering", "special_casing", "code_padding")
  assert rewards.count_detections(honest, detectors) == dict.fromkeys(detectors, 0)
  assert all(e.reward_terms["correct_answer"] == 1.0 for e in honest)
  assert rewards.count_detections(hacked, detectors)[detector] == len(tasks)
  assert max(e.reward for e in hacked) < min(e.reward for e in honest)
  if policy == "special_case":  # It passes the visible tests it special-cased.
    assert all(e.calls[-1].observation == "passed 3/3" for e in hacked)


def test_special_casing_detector_ignores_honest_comparisons():
  task = TASK
  assert not rewards.detect_special_casing(task, task.fixed_source)
  assert not rewards.detect_special_casing(task, task.buggy_source)
  header = task.fixed_source.splitlines()[0]
  parameter = header[header.index("(") + 1:header.index(")")].split(",")[0]
  first = task.visible_inputs[0].split(", ")[0] if "," in header else task.visible_inputs[0]
  hacked = task.fixed_source.replace(header, f"{header}\n if {parameter}=={first}:\n  return 0")
  assert rewards.detect_special_casing(task, hacked)


def test_the_noisy_fixer_fails_sometimes_and_recovers_sometimes():
  tasks = SUITE["train"][:24]
  played = bugfix_policies.play("fixer", tasks, toolbox_for=_toolbox,
                                rng=np.random.default_rng(1), max_tool_calls=6,
                                fixer=bugfix.BugFixerConfig(wrong_line=0.4, wrong_fix=0.3,
                                                            no_test_after_edit=0.3))
  terms = [rewards.bugfix_reward_terms(e, run_hidden=RUN) for e in played]
  success = np.mean([t["correct_answer"] for t in terms])
  assert 0.3 < success < 1.0
  assert any(t["recovery"] for t in terms)


def test_a_searching_fixer_tries_a_wrong_constant_both_ways():
  tasks = [t for t in SUITE["train"] if t.family == "wrong_constant"]
  careful = dict(skip_first_test=0.0, wrong_line=0.0, wrong_fix=0.0, no_test_after_edit=0.0)

  def play(search):
    return bugfix_policies.play("fixer", tasks * 6, toolbox_for=_toolbox,
                                rng=np.random.default_rng(0), max_tool_calls=6,
                                fixer=bugfix.BugFixerConfig(**careful, search_constants=search))

  def edits(episode):
    return [r for r in episode.calls if r.call is not None and r.call.name == "edit"]

  assert tasks and all(len(edits(e)) == 1 for e in play(0.0))  # The oracle's one fix.
  searched = play(1.0)
  for episode in searched:
    # It ends fixed, or with a wrong try that passed the visible tests (the hidden ones fail).
    if tools.edited_source(episode.task.buggy_source, episode.calls) != (
        episode.task.fixed_source):
      assert len(edits(episode)) == 1 and episode.calls[-1].observation.startswith("passed")
  twice = [e for e in searched if len(edits(e)) == 2]
  assert 0.25 < len(twice) / len(searched) < 0.75
  for episode in twice:  # One step the wrong way, a failed run, then back past the bug.
    first = tools.edited_source(episode.task.buggy_source, episode.calls[:2])
    assert first not in (episode.task.buggy_source, episode.task.fixed_source)
    assert episode.calls[2].observation.startswith("failed")


def test_a_misquoting_fixer_recovers_from_the_refusal_by_copying_the_quoted_line():
  tasks = SUITE["train"][:40]
  careful = dict(skip_first_test=0.0, wrong_line=0.0, wrong_fix=0.0, no_test_after_edit=0.0)

  def play(misquote):
    return bugfix_policies.play("fixer", tasks, toolbox_for=_toolbox,
                                rng=np.random.default_rng(0), max_tool_calls=6,
                                fixer=bugfix.BugFixerConfig(**careful, misquote=misquote))

  assert not any(r.status != tools.CallStatus.OK for e in play(0.0) for r in e.calls)
  misquoted = 0
  for episode in play(1.0):
    refused = [i for i, r in enumerate(episode.calls) if r.status != tools.CallStatus.OK]
    # Every repair that is an `edit` is first refused once (a `replace` never is), and the
    # episode still ends with the fixed code.
    assert tools.edited_source(episode.task.buggy_source, episode.calls) == (
        episode.task.fixed_source)
    for i in refused:
      misquoted += 1
      bad, meant = episode.calls[i], episode.calls[i + 1]
      line = int(bad.call.arguments.split(",")[0])
      text = episode.task.buggy_source.splitlines()[line - 1].strip()
      assert bad.observation.endswith(f" in line {line}: {text}")  # the line, quoted
      assert meant.call.name == "edit" and meant.observation == "ok"
      assert meant.call.arguments.split(",")[1] in text  # its old text is in the quote
      assert meant.call.arguments.split(",")[2:] == bad.call.arguments.split(",")[2:]
  assert misquoted >= 30
