"""What a phase is, and the registry of phases by name.

A phase is one training procedure of the job (SFT, GRPO, PPO, DPO, ...). It declares its
settings, the train state it starts from and checkpoints, and one step; `run_phase` (the job's
one loop) owns everything around the step: logging, evaluation, the drift monitor, the audit
log, checkpoints and resume, and the sampled-token budget. Adding an algorithm is one module
that subclasses `Phase` and calls `register_phase`:

    class Reinforce(phases.Phase):
      name, phase_id, online = "reinforce", 20, True

      def settings(self, config):
        return config.grpo

      def prepare(self, job, state, reference):
        return jax.jit(my_update, donate_argnums=(0,))

      def step(self, job, update, state, *, step, key, rng):
        tasks = self.draw_tasks(job, rng, job.config.grpo.prompts_per_step)
        rollout = job.train_episodes(state.params, tasks, key=key, rng=rng, group_size=1)
        state, metrics = update(state, job.place_batch(phases.policy_batch(rollout)))
        return phases.StepResult(state, metrics, rollout)

    phases.register_phase(Reinforce())

Host code.
"""

import dataclasses
from typing import Any

import numpy as np

from rlagents import episodes as episodes_lib


class PhaseError(ValueError):
  """A phase that cannot be registered or found; the message names it."""


@dataclasses.dataclass
class StepResult:
  """What one step of a phase produced.

  Attributes:
    state: the train state after the step.
    metrics: the update's metrics (device arrays or floats); written every `log_every` steps.
    rollout: the training episodes the step sampled (online phases), else None: the loop
      writes them to the audit log, feeds their rewards to the drift monitor, counts their
      tokens against the budget and logs their reward terms and success.
    extra_metrics: host figures to log beside `metrics` (e.g. mismatched in-jit calls).
    extra_sampled_tokens: policy tokens the step sampled outside `rollout` (e.g. a self-play
      proposer's episodes, audited by the phase): counted against the sampled-token budget.
  """
  state: Any
  metrics: Any
  rollout: episodes_lib.RolloutBatch | None = None
  extra_metrics: dict[str, float] = dataclasses.field(default_factory=dict)
  extra_sampled_tokens: int = 0


class Phase:
  """One training procedure of the job; see the module docstring.

  Class attributes:
    name: the registry key (`config.algorithm` for the phase after SFT) and, unless
      `checkpoint_name` says otherwise, its checkpoint directory and audit phase.
    checkpoint_name: the checkpoint directory and the phase recorded in its metadata.
    phase_id: the data stream of its steps (`numpy default_rng([seed, phase_id, step])`).
    online: its steps sample training episodes (audited, drift-monitored, token-budgeted).
    periodic_eval: it evaluates on `heldout` every `eval.every_steps` steps.
  """
  name: str = ""
  checkpoint_name: str = ""
  phase_id: int = 0
  online: bool = False
  periodic_eval: bool = True

  @property
  def directory(self) -> str:
    return self.checkpoint_name or self.name

  def settings(self, config) -> Any:
    """The config section of its settings (with `num_steps` and `optimizer`)."""
    raise NotImplementedError

  def num_steps(self, config) -> int:
    return self.settings(config).num_steps

  def validate(self, config) -> str | None:
    """Why `config` cannot run this phase (one line naming the fields), or None."""
    del config
    return None

  def init_state(self, job, params):
    """A fresh train state from policy `params` (the SFT result, or the initial policy)."""
    return job.train_state(params, self.settings(job.config).optimizer)

  def template_state(self, job):
    """A train state of the right structure to restore a checkpoint into."""
    return self.init_state(job, job.init_params())

  def policy_params(self, state):
    """The policy's train-state parameters in `state` (evaluated, exported, passed on)."""
    return state.params

  def prepare(self, job, state, reference) -> Any:
    """Once before the first step of this invocation (compiles, data); returns a context.

    `reference` is the phase's frozen reference policy (the SFT parameters), or None for SFT.
    """
    del job, state, reference
    return None

  def step(self, job, context, state, *, step: int, key, rng: np.random.Generator) -> StepResult:
    """One step: sample (online phases), update; `key` and `rng` are this step's own."""
    raise NotImplementedError

  def checkpoint_metadata(self, context) -> dict[str, Any]:
    """What the phase adds to each checkpoint's metadata (JSON values), e.g. work in flight."""
    del context
    return {}

  def restore(self, context, metadata: dict[str, Any]) -> None:
    """On resume, after `prepare`: puts back into `context` what `checkpoint_metadata` saved."""
    del context, metadata

  def resumed(self, metadata: dict[str, Any]) -> str | None:
    """A line for the user when resuming from a checkpoint with `metadata`, or None."""
    del metadata
    return None

  def extra_curve_splits(self, job) -> tuple[str, ...]:
    """Evaluation splits besides `heldout` whose success curve the loop writes at every
    evaluation point (`eval/<split>_success`)."""
    del job
    return ()

  def warm_start_tasks(self, job, rng: np.random.Generator) -> list[Any]:
    """Tasks besides the train split's on which SFT adds the expert's demonstrations when this
    phase follows it (e.g. self-play's smaller problems for the solver)."""
    del job, rng
    return []

  def warm_start_demonstrations(self, job, rng: np.random.Generator
                                ) -> list[episodes_lib.Episode]:
    """Episodes SFT adds to the expert's demonstrations when this phase follows it (e.g. a
    self-play proposer's examples); SFT audits them with `role='proposer'`."""
    del job, rng
    return []

  def panels(self, config) -> dict[str, list[str]]:
    """Its panels of `learning_curves.png` (title -> metric names), beside the loop's."""
    del config
    return {}

  def finish(self, job, context) -> dict[str, Any]:
    """After the last step of this invocation; what it adds to the report's `after_sft`."""
    del job, context
    return {}

  # ---- helpers for subclasses ----

  @staticmethod
  def draw_tasks(job, rng: np.random.Generator, count: int) -> list[Any]:
    """`count` distinct training tasks drawn with `rng`: from the whole train split, or with
    `rl_tasks='unseen_by_sft'` from those SFT's demonstrations were not played on.

    Raises:
      PhaseError: fewer tasks to draw from than `count`.
    """
    train = job.suite.splits["train"]
    start = job.config.sft.num_demonstrations if job.config.rl_tasks == "unseen_by_sft" else 0
    if len(train) - start < count:
      raise PhaseError(
          f"rl_tasks={job.config.rl_tasks!r}: {max(len(train) - start, 0)} training tasks to "
          f"draw {count} prompts from (train split {len(train)}, sft.num_demonstrations "
          f"{job.config.sft.num_demonstrations}); enlarge the train split")
    return [train[start + i] for i in rng.choice(len(train) - start, count, replace=False)]


def policy_batch(rollout: episodes_lib.RolloutBatch) -> dict[str, np.ndarray]:
  """The update batch of sampled episodes: tokens, loss_mask, old_logprobs and rewards."""
  return {"tokens": rollout.tokens, "loss_mask": rollout.loss_mask,
          "old_logprobs": rollout.logprobs,
          "rewards": np.array([e.reward for e in rollout.episodes], np.float32)}


_REGISTRY: dict[str, Phase] = {}


def register_phase(phase: Phase) -> Phase:
  """Registers `phase` under `phase.name` (`--config.algorithm=<name>` after SFT).

  Raises:
    PhaseError: no name, or the name is taken by another phase.
  """
  if not phase.name:
    raise PhaseError(f"{type(phase).__name__} has no name")
  if phase.name in _REGISTRY and type(_REGISTRY[phase.name]) is not type(phase):
    raise PhaseError(f"phase {phase.name!r} is already registered "
                     f"({type(_REGISTRY[phase.name]).__name__})")
  _REGISTRY[phase.name] = phase
  return phase


def get_phase(name: str) -> Phase:
  """The registered phase `name`.

  Raises:
    PhaseError: naming the registered phases.
  """
  if name not in _REGISTRY:
    raise PhaseError(f"unknown phase {name!r}; registered: {', '.join(phase_names())}")
  return _REGISTRY[name]


def phase_names() -> tuple[str, ...]:
  return tuple(sorted(_REGISTRY))
