"""The task-suite registry: what a suite gives the job, and how the job finds it by name.

A suite is everything the job needs to train and evaluate a policy on one kind of task: its
splits, its tools (already guarded), its verifier and shaping terms, an expert for the SFT
demonstrations, its hacking detectors, and how to rebuild a task from an audit record. A suite
is made by a factory, `factory(config, data_dir) -> TaskSuite`, which reads whatever it needs of
the job's config and may write its data under `data_dir`.

Built-in suites are registered by name (`register_suite`); a user's suite needs no
registration: `--config.task=my_pkg.my_task:suite` names a factory by module path and attribute.

    def suite(config, data_dir):
      tools = [WordCountTool()]
      return tasks.TaskSuite(
          name="word_count", splits=load_my_splits(), eval_splits=("heldout", "calibration"),
          toolbox_for=lambda task: guardrails.guarded_toolbox(tools),
          score=my_score, reward_terms=("correct_answer", "valid_call"),
          expert=my_expert, task_from_record=lambda d: WordTask(**d))

Host code.
"""

import dataclasses
import importlib
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import tools as tools_lib
from rlagents.tasks import _proposals

# The splits a suite evaluates on may be any of these; "train" is required besides.
EVAL_SPLIT_NAMES = ("heldout", "heldout_ood", "calibration")


class SuiteError(ValueError):
  """A task suite that cannot be found or is incomplete; the message names it."""


Score = Callable[[episodes_lib.Episode], tuple[float, dict[str, float]]]
Expert = Callable[[Sequence[Any], np.random.Generator, int], list[episodes_lib.Episode]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskSuite:
  """Everything the job needs of one task suite.

  Attributes:
    name: the suite's name (audit records of a suite other than 'calculator' carry it).
    splits: split name -> tasks (objects with `task_id` and `prompt`); 'train' and every
      name in `eval_splits`.
    eval_splits: the splits evaluated during and after training, 'heldout' first; 'calibration'
      (a split the policy never trains on) feeds the proxy-drift monitor.
    toolbox_for: `toolbox_for(task)` -> the guarded tools of that task's episode
      (`guardrails.guarded_toolbox`: allow-list and review gate).
    score: `score(episode)` -> `(reward, reward_terms)`: the verifiable gate and shaping terms;
      the terms include `correct_answer` (1.0 when the answer verifies, else 0.0), from which
      success, preferences and feedback are read.
    reward_terms: the names of the terms `score` writes (the learning-curve panel plots them).
    expert: `expert(tasks, rng, max_tool_calls)` -> episodes, the SFT demonstrations and the
      report's reference; None when the suite has no expert (SFT then cannot run).
    detectors: names of `rewards.count_detections` detectors reported per policy.
    task_from_record: rebuilds a task from an audit record's `task` field (replay); None when
      the suite's tasks cannot be rebuilt.
    scripted_segment: `scripted_segment(policy, episode, rng)` -> segment, for suites played
      by scripted policies (`config.scripted_policy`); None otherwise.
    sandboxed: its tools or its reward run untrusted code in `rlagents.sandbox`; the report
      then says which isolation mode ran (`sandbox.isolation_mode()`).
    jax_env: `jax_env(tasks, tokenizer, rollout_config)` -> the same tasks as a JAX text
      environment (`envs.TextEnvironment`) for `rollout_mode='jit'`; None when the suite has
      none. Its factory then says so (`register_suite(..., jax_native=True)`, or a
      `jax_native = True` attribute on a module-path factory) so configs are checked early.
    proposals: how the policy proposes tasks of this suite (`ProposalGrammar`), for self-play
      (`algorithm='grpo_selfplay'`); None when the suite has none.
  """
  name: str
  splits: Mapping[str, Sequence[Any]]
  eval_splits: tuple[str, ...]
  toolbox_for: Callable[[Any], tools_lib.ToolBox]
  score: Score
  reward_terms: tuple[str, ...]
  expert: Expert | None = None
  detectors: tuple[str, ...] = ()
  task_from_record: Callable[[Mapping[str, Any]], Any] | None = None
  scripted_segment: Callable[..., str] | None = None
  sandboxed: bool = False
  jax_env: Callable[..., Any] | None = None
  proposals: _proposals.ProposalGrammar | None = None

  def __post_init__(self):
    missing = [s for s in ("train",) + tuple(self.eval_splits) if s not in self.splits]
    if missing:
      raise SuiteError(f"task suite {self.name!r} lacks the split(s) {', '.join(missing)} "
                       f"(it has {', '.join(sorted(self.splits)) or 'none'})")
    if not self.eval_splits or self.eval_splits[0] != "heldout":
      raise SuiteError(f"task suite {self.name!r}: eval_splits must start with 'heldout', got "
                       f"{self.eval_splits!r}")
    unknown = set(self.eval_splits) - set(EVAL_SPLIT_NAMES)
    if unknown:
      raise SuiteError(f"task suite {self.name!r}: unknown eval split(s) {sorted(unknown)}; "
                       f"valid: {', '.join(EVAL_SPLIT_NAMES)}")
    for split in ("train",) + tuple(self.eval_splits):
      if not self.splits[split]:
        raise SuiteError(f"task suite {self.name!r}: split {split!r} is empty")

  def score_all(self, episodes: Sequence[episodes_lib.Episode]) -> None:
    """Sets each episode's `reward` and `reward_terms`."""
    for episode in episodes:
      episode.reward, episode.reward_terms = self.score(episode)


SuiteFactory = Callable[[Any, str], TaskSuite]
_REGISTRY: dict[str, SuiteFactory] = {}
_JAX_NATIVE: set[str] = set()


def register_suite(name: str, factory: SuiteFactory, *, jax_native: bool = False
                   ) -> SuiteFactory:
  """Registers `factory(config, data_dir) -> TaskSuite` as `--config.task=name`.

  `jax_native`: its suites have a `jax_env` (`rollout_mode='jit'` can run them).

  Raises:
    SuiteError: the name is taken by another factory, or holds ':' (module paths use it).
  """
  if ":" in name or not name:
    raise SuiteError(f"a suite name must be non-empty and without ':', got {name!r}")
  if _REGISTRY.get(name, factory) is not factory:
    raise SuiteError(f"task suite {name!r} is already registered")
  _REGISTRY[name] = factory
  if jax_native:
    _JAX_NATIVE.add(name)
  return factory


def is_jax_native(task: str) -> bool:
  """Whether the suite `task` (a name or `module.path:attribute`) has a JAX environment.

  Raises:
    SuiteError: as `suite_factory`.
  """
  return task in _JAX_NATIVE or bool(getattr(suite_factory(task), "jax_native", False))


def registered_suites() -> tuple[str, ...]:
  return tuple(sorted(_REGISTRY))


def suite_factory(task: str) -> SuiteFactory:
  """The factory of a registered suite name or of a `module.path:attribute` reference.

  Raises:
    SuiteError: an unknown name, a module that does not import, or an attribute that is missing
      or not callable; the message names it.
  """
  if ":" not in task:
    if task not in _REGISTRY:
      raise SuiteError(f"unknown task {task!r}; registered: {', '.join(registered_suites())}, "
                       "or give a factory as 'module.path:attribute'")
    return _REGISTRY[task]
  module_name, _, attribute = task.partition(":")
  try:
    module = importlib.import_module(module_name)
  except ImportError as error:
    raise SuiteError(f"task {task!r}: module {module_name!r} does not import ({error})") from None
  factory = getattr(module, attribute, None)
  if not callable(factory):
    raise SuiteError(f"task {task!r}: {module_name} has no callable {attribute!r} "
                     "(a factory `(config, data_dir) -> tasks.TaskSuite`)")
  return factory
