"""The proposal interface and its checker, on the calculator suite's grammar."""

import dataclasses

import numpy as np
import pytest

from rlagents import tasks
from rlagents.tasks import calculator

CONFIG = tasks.CalculatorSuiteConfig(num_train=200, num_heldout=20, num_heldout_ood=20,
                                     num_calibration=20)


@pytest.fixture(scope="module")
def splits():
  return tasks.generate_suite(CONFIG)


def _checker(splits):
  grammar = tasks.proposal_grammar(CONFIG)
  return tasks.ProposalChecker(grammar, {s: splits[s] for s in tasks.EVAL_SPLIT_NAMES})


def test_an_accepted_proposal_carries_the_tools_answer(splits):
  verdict = _checker(splits).check(" 12*345+6-78 ")
  assert verdict.accepted and verdict.reason == ""
  task = verdict.task
  assert (task.expression, task.answer, task.split) == ("12*345+6-78", 12 * 345 + 6 - 78,
                                                        "proposed")
  assert task.prompt == "12*345+6-78=?" and task.num_operands == 4 and task.max_digits == 3
  assert tasks.is_correct(task, "4068")


@pytest.mark.parametrize("text", [
    "12+", "+12", "012+3", "1234+5", "1/2", "1 + 2", "(1+2)*3", "a+b", "",
    "1+2+3+4+5+6+7",  # 7 operands of up to 3 digits may overflow int64: outside the grammar
])
def test_text_outside_the_grammar_is_invalid(splits, text):
  checker = _checker(splits)
  assert checker.check(text).reason == "invalid"
  assert checker.counts["invalid"] == 1 and checker.counts["accepted"] == 0


def test_no_answer_and_duplicates_are_rejected_and_counted(splits):
  checker = _checker(splits)
  assert checker.check(None).reason == "unanswered"
  assert checker.check("1+2*3+4").accepted
  assert checker.check("42").accepted  # a lone number: valid, and trivial
  assert checker.check("1+2*3+4").reason == "duplicate"
  assert checker.counts == {"accepted": 2, "unanswered": 1, "invalid": 0, "unsolvable": 0,
                            "duplicate": 1, "eval_split": 0}


@pytest.mark.parametrize("split", tasks.EVAL_SPLIT_NAMES)
def test_a_proposal_equal_to_an_evaluation_task_is_discarded(splits, split):
  checker = _checker(splits)
  for task in splits[split][:5]:
    verdict = checker.check(task.expression)
    assert (verdict.accepted, verdict.reason, verdict.split) == (False, "eval_split", split)
  assert checker.counts["eval_split"] == 5 and checker.eval_split_counts[split] == 5
  assert not checker.seen  # Never kept as a training task, not even as a seen key.


def test_in_distribution_problems_reserved_by_hash_are_discarded(splits):
  # Expressions of the training shape that the split rule assigns to heldout or calibration
  # are discarded although these particular ones were not drawn into the splits.
  grammar = tasks.proposal_grammar(CONFIG)
  rng = np.random.default_rng(1)
  reserved = {"heldout": 0, "calibration": 0}
  checker = _checker(splits)
  for _ in range(300):
    a, b, c = rng.integers(0, 1000, size=3)
    text = f"{a}+{b}*{c}"
    expected = calculator._in_distribution_split(text)  # pylint: disable=protected-access
    assert grammar.reserved_split(text) == (None if expected == "train" else expected)
    verdict = checker.check(text)
    if expected != "train":
      reserved[expected] += 1
      assert verdict.reason == "eval_split" and verdict.split == expected
  assert reserved["heldout"] > 10 and reserved["calibration"] > 10
  # Another shape (four operands) is never reserved by hash.
  assert grammar.reserved_split("1+2+3+4") is None


def test_checker_state_round_trips(splits):
  checker = _checker(splits)
  checker.check("1+2")
  checker.check(splits["heldout_ood"][0].expression)
  restored = _checker(splits)
  restored.load(checker.state())
  assert restored.state() == checker.state()
  assert restored.check("1+2").reason == "duplicate"


def test_demonstrations_are_accepted_proposals_of_one_to_n_operands(splits):
  grammar = tasks.proposal_grammar(CONFIG)
  texts = grammar.demonstrations(splits["train"], np.random.default_rng(0))
  assert len(texts) == len(splits["train"])
  counts = {len(grammar.to_task(t).expression.replace("*", "+").replace("-", "+").split("+"))
            for t in texts}
  assert counts == {1, 2, 3}  # never more than training's three
  assert grammar.difficulty(grammar.to_task("12*3")) == {"operands": 2.0, "length": 4.0,
                                                        "max_digits": 2.0}


def test_compose_extends_a_training_expression_beyond_training_sizes(splits):
  grammar = tasks.proposal_grammar(CONFIG)
  train = splits["train"]
  rng = np.random.default_rng(0)
  counts = []
  for i in range(300):
    first, second = train[i % len(train)], train[-1 - i % len(train)]
    text = grammar.compose(first, second, rng)
    task = grammar.to_task(text)
    counts.append(task.num_operands)
    assert text.startswith(first.expression)
    # What follows the first expression is an operator then the second's leading operands.
    rest = text[len(first.expression):]
    assert rest[0] in CONFIG.operators and second.expression.startswith(rest[1:])
  # Longer than any training expression, never past the grammar's limit, every count between.
  limit = 18 // CONFIG.ood_max_digits
  assert set(counts) == set(range(CONFIG.num_operands + 1, min(2 * CONFIG.num_operands, limit)
                                  + 1)), sorted(set(counts))


def test_any_suite_grammar_plugs_in_and_unsolvable_is_counted():
  # A toy grammar: a word whose "answer" is its length, unsolvable when it has no vowel.
  def to_task(text):
    if not text.isalpha():
      raise tasks.InvalidProposal(text)
    if not set(text) & set("aeiou"):
      raise tasks.UnsolvableProposal(text)
    return text

  grammar = tasks.ProposalGrammar(
      prompt="word:", to_task=to_task, key=lambda task: task,
      reserved_split=lambda key: "calibration" if key.startswith("z") else None,
      difficulty=lambda task: {"length": len(task)},
      demonstrations=lambda train, rng: list(train))
  checker = tasks.ProposalChecker(grammar, {"heldout": ["apple"], "calibration": []})
  verdicts = [checker.check(t) for t in ("banana", "rhythm", "b4", "apple", "zebra", "banana")]
  assert [v.reason for v in verdicts] == ["", "unsolvable", "invalid", "eval_split",
                                          "eval_split", "duplicate"]
  assert [v.split for v in verdicts][3:5] == ["heldout", "calibration"]
  assert checker.eval_split_counts == {"heldout": 1, "calibration": 1}


def test_the_key_door_grammar_accepts_worlds_the_generator_could_draw_and_nothing_else():
  from rlagents.tasks import keydoor  # pylint: disable=g-import-not-at-top
  config = keydoor.KeyDoorSuiteConfig(num_train=200, num_heldout=20, num_heldout_ood=20,
                                      num_calibration=20)
  worlds = keydoor.generate_suite(config)
  grammar = keydoor.proposal_grammar(config)
  checker = tasks.ProposalChecker(
      grammar, {s: worlds[s] for s in ("heldout", "heldout_ood", "calibration")})
  rng = np.random.default_rng(0)

  # Every training world's layout is accepted as the same world, with its shortest solution.
  for world in worlds["train"][:50]:
    task = checker.check(keydoor.layout_text(world)).task
    assert task.split == "proposed" and task.prompt == world.prompt
    assert task.shortest_calls == world.shortest_calls
    assert grammar.difficulty(task) == {"area": 42.0, "calls": float(world.shortest_calls)}
  # A world is played by the same rules: the expert's plan solves a proposed one.
  task = grammar.to_task("8x5 door 4,1 key 0,4 goal 7,0 at 3,0")
  episode = keydoor.run_expert_episodes(
      [task], toolbox_for=keydoor.toolbox_for, rng=rng, max_tool_calls=40,
      config=dataclasses.replace(config, slip_rate=0.0, malformed_rate=0.0,
                                 forget_key_rate=0.0))[0]
  assert keydoor.reward_terms(episode)["correct_answer"] == 1.0
  assert len(episode.actions) - 1 == task.shortest_calls == 7 + 1 + 6 + 1 + 5

  for text in ("7x6 door 3,2 key 1,4 goal 5,0 at 1,4",   # the key on the start
               "7x6 door 1,2 key 0,4 goal 5,0 at 0,1",   # one column left of the wall
               "7x6 door 3,2 key 4,4 goal 5,0 at 0,1",   # the key right of the wall
               "7x6 door 3,2 key 1,6 goal 5,0 at 0,1",   # a row outside the grid
               "11x6 door 3,2 key 1,4 goal 5,0 at 0,1",  # wider than any split's worlds
               "07x6 door 3,2 key 1,4 goal 5,0 at 0,1",  # not canonical
               "7x6 door 3,2  key 1,4 goal 5,0 at 0,1", "move(north)"):
    assert checker.check(text).reason == "invalid", text
  long_way = "10x8 door 7,0 key 0,7 goal 9,7 at 6,0"  # 13 + 1 + 13 + 1 + 10 calls
  assert checker.check(long_way).accepted
  strict = tasks.ProposalChecker(keydoor.proposal_grammar(
      dataclasses.replace(config, max_calls=37)), {})
  assert strict.check(long_way).reason == "unsolvable"  # over the suite's max_calls
  assert checker.check(keydoor.layout_text(worlds["heldout"][0])).split == "heldout"
  assert checker.check(keydoor.layout_text(worlds["heldout_ood"][0])).split == "heldout_ood"
  assert checker.check(keydoor.layout_text(worlds["train"][0])).reason == "duplicate"

  # Composed examples are larger than training's worlds and mostly valid.
  composed = [grammar.compose(a, b, rng)
              for a, b in zip(worlds["train"][:100], worlds["train"][100:200])]
  areas = [grammar.difficulty(grammar.to_task(t))["area"] for t in composed
           if checker.check(t).reason in ("", "duplicate", "eval_split")]
  assert len(areas) >= 90 and min(areas) > 42
