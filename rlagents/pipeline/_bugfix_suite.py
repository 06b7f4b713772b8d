"""The bug-fix suite as a registry entry (`--config.task=bugfix`): a coding agent trained in the
sandbox.

Each episode gets its own workspace (the buggy function) and guarded tools: `view`, `run_tests`
(the visible tests, in the sandbox), `replace` and `edit`; the answer submits the edited code,
and the reward runs the hidden tests on it in a fresh sandbox (`rewards.bugfix_reward_terms`).
SFT imitates the noisy scripted fixer; GRPO then trains on the hidden-test reward. Host code.

Sandbox runs dominate a step's cost, so the suite keeps three economies, none of which changes
a result: kernel-mode runs go through a `sandbox.SandboxPool` of pre-started sandboxes (each
run still in a fresh one, with every limit); a verdict is remembered per (code, tests), since
the same code under the same pinned tests gets the same verdict (a group of GRPO episodes often
submits the same fix); and a batch's hidden-test runs go on concurrently.
"""

import atexit
import collections
import concurrent.futures
import dataclasses
import threading
from typing import Callable, Mapping, Sequence

from rlagents import episodes as episodes_lib
from rlagents import guardrails
from rlagents import rewards
from rlagents import sandbox
from rlagents import tasks as tasks_lib
from rlagents import tools as tools_lib
from rlagents.tasks import bugfix
from rlagents.tasks import bugfix_policies
from rlagents.tasks import suites_tfds

_CACHE_SIZE = 50_000
_CONCURRENT_RUNS = 8


class VerdictCache:
  """`run_tests(solution, tests)` remembered per (solution, tests); thread-safe, bounded."""

  def __init__(self, runner, size: int = _CACHE_SIZE):
    self.runner = runner
    self.size = size
    self._verdicts: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()
    self.hits = self.misses = 0

  def __call__(self, solution: str, tests: Mapping[str, str]) -> sandbox.TestVerdict:
    key = (solution, tuple(sorted(tests.items())))
    with self._lock:
      if key in self._verdicts:
        self.hits += 1
        self._verdicts.move_to_end(key)
        return self._verdicts[key]
    verdict = self.runner(solution, tests)
    with self._lock:
      self.misses += 1
      self._verdicts[key] = verdict
      while len(self._verdicts) > self.size:
        self._verdicts.popitem(last=False)
    return verdict


@dataclasses.dataclass(frozen=True, kw_only=True)
class BugFixSuite(tasks_lib.TaskSuite):
  """A `TaskSuite` whose scoring runs a batch's hidden tests concurrently.

  Attributes:
    characters: characters of code the policy's tokenizer needs beyond the built-in ones.
    run_hidden: `run_hidden(episodes)` runs the hidden tests of the submitted episodes into the
      verdict cache, concurrently; `score` then finds them there.
  """
  characters: str = ""
  run_hidden: Callable[[Sequence[episodes_lib.Episode]], None] | None = None

  def score_all(self, episodes: Sequence[episodes_lib.Episode]) -> None:
    if self.run_hidden is not None:
      self.run_hidden(episodes)
    super().score_all(episodes)


def bugfix_suite(config, data_dir: str) -> BugFixSuite:
  """Buggy functions fixed with view / run_tests / replace / edit; rewarded by hidden tests."""
  suite_config = config.bugfix
  limits = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=5, memory_bytes=256 * 2**20,
                                 isolation=config.sandbox_isolation)
  if config.sandbox_isolation == "kernel":
    pool = sandbox.SandboxPool(size=_CONCURRENT_RUNS)
    atexit.register(pool.close)
    runner = VerdictCache(lambda solution, tests: pool.run_tests(solution, tests, limits=limits))
  else:
    runner = VerdictCache(tools_lib.default_runner(limits))
  eval_splits = ("heldout", "heldout_ood", "calibration")
  splits = {split: suites_tfds.load_split("bugfix", split, suite=suite_config,
                                          data_dir=data_dir)
            for split in ("train",) + eval_splits}

  def toolbox_for(task):
    workspace = tools_lib.CodeWorkspace(task.buggy_source, task.visible_tests, runner=runner)
    return guardrails.guarded_toolbox(workspace.tools(),
                                      allow={"view": None, "run_tests": None, "replace": None,
                                             "edit": None})

  def score(episode):
    terms = rewards.bugfix_reward_terms(episode, run_hidden=runner, config=config.bugfix_reward)
    return rewards.compose_bugfix_reward(terms, config.bugfix_reward), terms

  def play_fixer(tasks, rng, max_tool_calls):
    return bugfix_policies.play("fixer", tasks, toolbox_for=toolbox_for, rng=rng,
                                max_tool_calls=max_tool_calls, fixer=suite_config.fixer)

  def run_hidden(episodes):
    # The code is read here, in one thread (Python's parser is not thread-safe in 3.11); only
    # the sandbox runs go on at once.
    jobs = {(tools_lib.edited_source(e.task.buggy_source, e.calls), e.task.hidden_tests)
            for e in episodes if e.answer is not None}
    with concurrent.futures.ThreadPoolExecutor(_CONCURRENT_RUNS) as threads:
      list(threads.map(lambda job: runner(job[0], {bugfix.TEST_FILE: job[1]}), jobs))

  return BugFixSuite(
      name="bugfix", splits=splits, eval_splits=eval_splits, toolbox_for=toolbox_for,
      score=score, reward_terms=rewards.BUGFIX_TERMS, expert=play_fixer,
      detectors=("test_tampering", "special_casing", "code_padding", "redundant_calls"),
      task_from_record=bugfix.from_record, sandboxed=True, characters=bugfix.CHARACTERS,
      run_hidden=run_hidden)


tasks_lib.register_suite("bugfix", bugfix_suite)
