"""The typed, validated configuration of the agent job and its conversion from nested dicts.

The dataclasses are the single source of defaults: `experiments/configs/` builds its
ml_collections config from `config_to_dict(AgentJobConfig())`, so every field can be overridden
from the command line, and `config_from_dict` turns it back, naming any unknown key or bad value.
"""

import dataclasses
import difflib
import math
import typing
from typing import Any, Mapping

from rlagents.episodes import ChatSettings
from rlagents.episodes import FORMATS
from rlagents.learners import DPOConfig
from rlagents.learners import GRPOConfig
from rlagents.learners import PPOAgentConfig
from rlagents.learners import RewardModelConfig
from rlagents.learners import SFTConfig
from rlagents.networks import LoraConfig
from rlagents.networks import TransformerConfig
from rlagents.parallel import MeshConfig
from rlagents.rewards import BugFixRewardConfig
from rlagents.rewards import LEARNABILITY_KINDS
from rlagents.rewards import ProxyDriftConfig
from rlagents.rewards import RewardConfig
from rlagents.rewards import SoftRewardConfig
from rlagents.rewards import SuiteRewardConfig
from rlagents.rollout import RolloutConfig
from rlagents.tasks import CalculatorSuiteConfig
from rlagents.tasks.bugfix import BugFixSuiteConfig
from rlagents.tasks.calculator_expert import NoisyExpertConfig
from rlagents.tasks.codefix import CodeFixSuiteConfig
from rlagents.tasks.keydoor import KeyDoorSuiteConfig
from rlagents.tasks.retrieval import RetrievalSuiteConfig
from rlagents.tasks.retrieval_expert import RetrievalExpertConfig
from rlagents.tasks.scripted_policies import POLICIES
from rlagents.world_models import ImaginationConfig

ROLLOUT_MODES = ("host", "jit")
RL_TASKS = ("all", "unseen_by_sft")
RL_MODES = ("sync", "async")


class ConfigError(ValueError):
  """A config key that does not exist, or a value that is impossible."""


def _is_count(value) -> bool:
  """Whether `value` is an int >= 0 (a bool is not)."""
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
  """Evaluation settings.

  Attributes:
    every_steps: evaluate on `heldout` every this many GRPO steps (0: only at the end).
    curve_tasks: heldout tasks used for the learning curve during training.
    temperature: sampling temperature of the evaluated policy (1 evaluates the stochastic
      policy that RL optimizes; 0 is greedy).
    greedy_too: also report greedy (temperature 0) success on `heldout` in the final report.
  """
  every_steps: int = 50
  curve_tasks: int = 256
  temperature: float = 1.0
  greedy_too: bool = True

  def __post_init__(self):
    if self.every_steps < 0 or self.curve_tasks < 1:
      raise ValueError("EvalConfig.every_steps must be >= 0 and curve_tasks >= 1")
    if self.temperature < 0:
      raise ValueError(f"EvalConfig.temperature must be >= 0, got {self.temperature}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraSettings:
  """Low-rank adapters instead of full fine-tuning (`rlagents.networks.LoraConfig`).

  Attributes:
    rank: the adapters' inner width; 0 turns LoRA off (every parameter is trained). With a rank,
      SFT and GRPO train only the adapters (the base weights stay frozen), checkpoints hold only
      the adapters, and the sampler and `export/` use the merged weights.
    alpha: the update is scaled by `alpha / rank`.
    targets: projections that get adapters, in every layer (q_proj, k_proj, v_proj, o_proj,
      gate_proj, up_proj, down_proj).
  """
  rank: int = 0
  alpha: float = 16.0
  targets: tuple[str, ...] = ("q_proj", "v_proj")

  def __post_init__(self):
    if not _is_count(self.rank):
      raise ValueError(f"lora.rank must be an int >= 0 (0: off), got {self.rank!r}")
    if self.rank:
      self.lora_config()  # validates alpha and targets

  def lora_config(self) -> LoraConfig:
    return LoraConfig(rank=self.rank, alpha=self.alpha, targets=tuple(self.targets))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreferenceDataConfig:
  """Where preference data come from (reward model, DPO, KTO).

  Attributes:
    expert_tasks: training tasks the noisy expert plays for the reward model's preferences.
    expert_attempts: episodes per task; a task with a correct and an incorrect one gives pairs.
    policy_prompts: training tasks the SFT policy samples for DPO / KTO data (stopped earlier by
      `sampled_token_budget`).
    policy_samples: episodes per prompt; DPO pairs a verified-correct with an incorrect one,
      KTO labels each episode by whether it verifies.
    preference_file: a JSONL preference file to use for DPO instead of sampling ('' to sample).
    feedback_file: a JSONL binary-feedback file to use for KTO instead of sampling.
  """
  expert_tasks: int = 2000
  expert_attempts: int = 4
  policy_prompts: int = 1024
  policy_samples: int = 8
  preference_file: str = ""
  feedback_file: str = ""

  def __post_init__(self):
    for name in ("expert_tasks", "policy_prompts"):
      if getattr(self, name) < 1:
        raise ValueError(f"PreferenceDataConfig.{name} must be >= 1, got {getattr(self, name)}")
    for name in ("expert_attempts", "policy_samples"):
      if getattr(self, name) < 2:
        raise ValueError(f"PreferenceDataConfig.{name} must be >= 2, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelfPlayConfig:
  """Self-play (`algorithm='grpo_selfplay'`): the policy proposes tasks and solves them.

  Each step the policy, prompted with the suite's proposal grammar, writes
  `round(proposed_fraction * grpo.prompts_per_step)` proposals; the accepted ones (valid,
  solvable, new, no evaluation task) are solved beside training tasks that fill the step's other
  prompts, `grpo.group_size` episodes each; both roles train in one GRPO update. The other
  GRPO settings (`grpo.*`) apply as they are.

  Attributes:
    proposed_fraction: share of each step's `grpo.prompts_per_step` prompts that are the
      policy's own proposals (in (0, 1]); a rejected proposal's prompt goes to a training task.
    learnability: the proposer's reward from its solver group's success rate p
      (`rewards.learnability_reward`): 'variance' is 4p(1-p), 'absolute' is 1-|2p-1|.
    learnability_peak: the solver success rate the proposer's reward peaks at, in (0, 1);
      0.5 (default) gives the two kinds above, a lower peak pays most for proposals the
      solver solves now and then (`rewards.learnability_reward`'s `peak`).
    proposer_demonstrations: proposer episodes added to the SFT demonstrations (proposals
      written from training tasks by the suite's grammar), so the policy can write a task in
      the grammar before self-play starts; 0 adds none.
    composed_demonstrations: share of those examples built from two training tasks by the
      grammar's `compose` (larger than any training task), so the proposer has seen the
      grammar beyond training's sizes; the rest are the grammar's `demonstrations`. Examples
      that are invalid or belong to an evaluation split are dropped (counted in the log).
    solver_demonstrations: expert demonstrations (the solver role) added to SFT on the tasks
      of the grammar's `demonstrations` written from training tasks: for the calculator,
      training expressions cut to 1 .. num_operands operands. The train split holds only
      training-size tasks, so the SFT solver is weak on smaller ones; learnability then pays
      most for those early in self-play and draws the proposer to them. Examples that belong
      to an evaluation split are dropped. 0 (default) adds none.
    warmup_steps: the phase's first `warmup_steps` steps train the solver on training tasks
      only (no proposals): the proposer starts once the solver has learned the training
      distribution, so that problems of the training size no longer pay the most
      learnability. 0 (default) proposes from the first step.
    consolidation_steps: the phase's last `consolidation_steps` steps (of `grpo.num_steps`)
      use `consolidation_fraction` instead of `proposed_fraction`: after training mostly on its
      own, harder proposals, the solver trains again on the training distribution; 0 (default)
      keeps one fraction throughout.
    consolidation_fraction: share of the prompts that are proposals in those steps, in [0, 1];
      0 trains the solver on training tasks only (no proposer episodes).
    proposer_weight: factor on the proposer's advantages (after per-role scaling), > 0. The
      proposer writes a few dozen tokens a step against the solver's thousands, so under
      `grpo.aggregation='token_mean'` its share of the update is small and the curriculum moves
      slowly; a weight above 1 gives the proposer a larger share. 1 (default) leaves the
      advantages as `losses.role_conditioned_advantages` gives them.
    proposer_kl_weight: factor on the KL to the reference (the SFT policy, `grpo.kl_beta`) of
      the proposer's episodes, >= 0. The SFT proposer writes tasks of every size its examples
      showed; a larger weight keeps it near that spread, so that learnability tilts the
      proposer towards what the solver can learn without collapsing it onto the sizes that
      paid first. 1 (default) gives both roles the same KL.
    proposer_kl_fade_steps: with > 0, `proposer_kl_weight` fades linearly to 1 over the
      phase's first `proposer_kl_fade_steps` steps: the solver meets problems of every size
      early, and the proposer is free later to follow what it can learn. 0 (default) keeps
      the weight constant.
    replay_fraction: share of each step's prompts given to proposals replayed from the
      frontier (accepted proposals whose last solver group succeeded sometimes, 0 < p < 1),
      drawn with probability proportional to their learnability; the proposer writes that many
      fewer proposals. Each replay updates the task's learnability; one solved always or never
      leaves the frontier. The frontier keeps training the solver on the edge of its ability in
      steps where the proposer writes easy problems. 0 (default) replays nothing.
    oversample: the policy writes `oversample` times as many proposals as the step has
      proposal prompts, and the solver gets that many of the accepted ones, drawn with
      probability proportional to the running learnability of their difficulty bucket (plus a
      floor; a bucket never solved scores 1); an accepted proposal left out earns its bucket's
      running learnability as its reward, so the proposer learns from every proposal. 1
      (default) solves every accepted proposal.
    select_by: the difficulty figures (names of the suite's `ProposalGrammar.difficulty`) that
      make a bucket for `oversample`; empty (default) uses all of them.
    replay_capacity: most proposals the frontier holds (the lowest learnability, then the
      oldest, leave first).
  """
  proposed_fraction: float = 0.5
  learnability: str = "variance"
  learnability_peak: float = 0.5
  proposer_demonstrations: int = 1000
  composed_demonstrations: float = 0.0
  solver_demonstrations: int = 0
  warmup_steps: int = 0
  consolidation_steps: int = 0
  consolidation_fraction: float = 0.0
  proposer_weight: float = 1.0
  proposer_kl_weight: float = 1.0
  proposer_kl_fade_steps: int = 0
  replay_fraction: float = 0.0
  replay_capacity: int = 256
  oversample: int = 1
  select_by: tuple[str, ...] = ()

  def __post_init__(self):
    if not 0 < self.proposed_fraction <= 1:
      raise ValueError(f"selfplay.proposed_fraction must be in (0, 1], got "
                       f"{self.proposed_fraction}")
    if self.learnability not in LEARNABILITY_KINDS:
      raise ValueError(f"selfplay.learnability must be one of {', '.join(LEARNABILITY_KINDS)}, "
                       f"got {self.learnability!r}")
    if not (isinstance(self.learnability_peak, (int, float))
            and 0.0 < self.learnability_peak < 1.0):
      raise ValueError(f"selfplay.learnability_peak must be a number in (0, 1), got "
                       f"{self.learnability_peak!r}")
    if not _is_count(self.proposer_demonstrations):
      raise ValueError(f"selfplay.proposer_demonstrations must be an int >= 0, got "
                       f"{self.proposer_demonstrations!r}")
    if not _is_count(self.solver_demonstrations):
      raise ValueError(f"selfplay.solver_demonstrations must be an int >= 0, got "
                       f"{self.solver_demonstrations!r}")
    if not 0.0 <= self.composed_demonstrations <= 1.0:
      raise ValueError(f"selfplay.composed_demonstrations must be in [0, 1], got "
                       f"{self.composed_demonstrations}")
    if not _is_count(self.warmup_steps):
      raise ValueError(f"selfplay.warmup_steps must be an int >= 0, got {self.warmup_steps!r}")
    if not _is_count(self.consolidation_steps):
      raise ValueError(f"selfplay.consolidation_steps must be an int >= 0, got "
                       f"{self.consolidation_steps!r}")
    if not 0.0 <= self.consolidation_fraction <= 1.0:
      raise ValueError(f"selfplay.consolidation_fraction must be in [0, 1], got "
                       f"{self.consolidation_fraction}")
    if not (isinstance(self.proposer_weight, (int, float)) and self.proposer_weight > 0
            and math.isfinite(self.proposer_weight)):
      raise ValueError(f"selfplay.proposer_weight must be a finite number > 0, got "
                       f"{self.proposer_weight!r}")
    if not (isinstance(self.proposer_kl_weight, (int, float)) and self.proposer_kl_weight >= 0
            and math.isfinite(self.proposer_kl_weight)):
      raise ValueError(f"selfplay.proposer_kl_weight must be a finite number >= 0, got "
                       f"{self.proposer_kl_weight!r}")
    if not _is_count(self.proposer_kl_fade_steps):
      raise ValueError(f"selfplay.proposer_kl_fade_steps must be an int >= 0, got "
                       f"{self.proposer_kl_fade_steps!r}")
    if not 0.0 <= self.replay_fraction < 1.0:
      raise ValueError(f"selfplay.replay_fraction must be in [0, 1), got {self.replay_fraction}")
    if not (_is_count(self.oversample) and self.oversample >= 1):
      raise ValueError(f"selfplay.oversample must be an int >= 1, got {self.oversample!r}")
    if not (isinstance(self.select_by, (tuple, list))
            and all(isinstance(name, str) and name for name in self.select_by)):
      raise ValueError(f"selfplay.select_by must be a tuple of difficulty names, got "
                       f"{self.select_by!r}")
    if not (_is_count(self.replay_capacity) and self.replay_capacity > 0):
      raise ValueError(f"selfplay.replay_capacity must be an int >= 1, got "
                       f"{self.replay_capacity!r}")


def _default_model() -> TransformerConfig:
  # vocab_size is set from the tokenizer by the job; max_len covers the rollout buffer.
  return TransformerConfig(vocab_size=1, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2,
                           d_ff=384, max_len=192)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLLoopConfig:
  """How an online RL phase (GRPO on host rollouts) schedules sampling and updates.

  Attributes:
    mode: 'sync' samples a batch, updates on it, samples the next with the new weights.
      'async' samples in a background thread with the newest weights it has (read at every
      turn, so an episode may continue across an update) while the learner updates on the
      batches it has: sampling, tool calls and updates overlap. The loss reweights the stale
      part by `grpo.off_policy_correction` (truncated importance sampling).
    max_staleness: in 'async', the most updates by which a batch's oldest token may precede
      the learner's weights. Batch `i` (for update `i`) starts once version
      `i - max_staleness` is published, so every batch is within the bound; batches of
      indices a learner skipped are dropped and counted (`async/dropped_batches`).
    queue_size: batches sampled ahead of the learner's current one (0: `max_staleness`; more
      than `max_staleness` is not allowed to run ahead).
    num_samplers: in 'async', sampler threads, each sampling whole batches: while one waits on
      its tools, another generates (JAX and the tools release the interpreter lock). 0: one
      per batch that may be sampled at once (`min(queue_size, max_staleness) + 1`).
  """
  mode: str = "sync"
  max_staleness: int = 1
  queue_size: int = 0
  num_samplers: int = 0

  def __post_init__(self):
    if self.mode not in RL_MODES:
      raise ValueError(f"rl.mode must be one of {', '.join(RL_MODES)}, got {self.mode!r}")
    if self.max_staleness < 0:
      raise ValueError(f"rl.max_staleness must be >= 0, got {self.max_staleness}")
    if self.queue_size < 0:
      raise ValueError(f"rl.queue_size must be >= 0, got {self.queue_size}")
    if self.num_samplers < 0:
      raise ValueError(f"rl.num_samplers must be >= 0 (0: one per batch sampled at once), "
                       f"got {self.num_samplers}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgentJobConfig:
  """The main job: SFT on a noisy expert's demonstrations, then GRPO, then evaluation.

  Attributes:
    seed: seeds parameters, data order, sampling and the tools' randomness.
    model: the policy network (vocab_size is taken from the tokenizer).
    init_from: '' for the built-in character-level model, or a local Hugging Face Llama / Qwen2
      checkpoint directory to start from: its architecture, weights and tokenizer replace the
      built-in ones, and of `model` only max_len, dtype, param_dtype and value_head apply. In
      the marker format its tokenizer must have the marker tokens (`<call>`, `</answer>`, ...)
      as single tokens; the error lists any that are missing (see
      `rlagents.pipeline._policy_init`). In the chat format it needs a chat template that
      renders tools.
    format: how episodes are written (`episodes.FORMATS`, see docs/models.md): 'marker', the
      project's marker tokens (the built-in model's format), or 'chat', the `init_from`
      checkpoint's own chat template with the tools' JSON schemas and its own tool-call syntax
      (`episodes.ChatFormat`); host rollouts only.
    chat: the chat format's tool-call syntax and system prompt (`episodes.ChatSettings`).
    lora: train low-rank adapters only (rank 0: full fine-tuning).
    tasks: the calculator task suite and its splits.
    tool_failure_rate: fraction of calculator calls that fail transiently ("busy, retry").
    expert: the scripted demonstrator's error rates.
    rollout: episode limits and sampling settings for RL.
    reward: weights of the reward terms.
    sft: the supervised warm start.
    grpo: the RL phase.
    eval: evaluation settings.
    algorithm: the phase that follows SFT, a registered phase (`pipeline.phases`): 'grpo' or
      'ppo' (online RL), 'dpo' or 'kto' (offline, on verified samples of the SFT policy or on
      `preferences` files), or one a user registered.
    ppo: PPO for the language agent (`algorithm='ppo'`).
    dpo: DPO / KTO settings (`algorithm='dpo'` or `'kto'`).
    reward_model: training of the reward model used when `soft_reward.weight > 0`.
    soft_reward: the reward model's term in the RL reward (weight 0: gate and shaping only).
    preferences: where the reward model's and DPO / KTO's data come from.
    sampled_token_budget: stop sampling once this many policy tokens were sampled after SFT
      (0: no budget). RL stops its steps there; DPO / KTO sample their data up to it. The same
      budget makes the algorithms comparable (`experiments/compare_algorithms.py`).
    checkpoint_every: save every this many steps of each phase (and at each phase's end).
    log_every: write training metrics every this many steps.
    task: the suite: a registered name (`tasks.registered_suites()`: "calculator",
      "retrieval", "codefix") or a user's factory as "module.path:attribute"
      (`tasks.TaskSuite`). "calculator", "retrieval" and user suites with an expert train a
      policy (SFT on the expert, then `algorithm`); "codefix" (and "retrieval" with a
      `scripted_policy`) runs a scripted policy through the whole pipeline (tools, guardrails,
      sandbox, rewards with hacking detectors, audit trail, report).
    retrieval: the retrieval QA suite.
    retrieval_expert: the error rates of the retrieval suite's scripted demonstrator.
    codefix: the code-fix suite.
    bugfix: the bug-fix suite (`task='bugfix'`): sizes, held-out bug families, the noisy fixer.
    bugfix_reward: the bug-fix reward's weights (`rewards.BugFixRewardConfig`).
    keydoor: the key-door text world (`task='keydoor'`): sizes, expert noise, reward weights.
    imagination: `algorithm='grpo_dyna'`: the learned simulator and its share of the groups.
    suite_reward: penalty weights of the retrieval and code-fix rewards.
    scripted_policy: '' to train a policy (calculator, retrieval), or a scripted policy
      (`scripted_policies.POLICIES`) to play on the retrieval or code-fix suite instead; the
      code-fix suite has no trained policy, and '' plays 'honest' there.
    rollout_mode: how GRPO samples its training episodes (calculator task): "host" runs the
      tool in Python between jitted sampling calls, through the guardrails; "jit" runs each
      whole step (multi-turn rollouts with the in-jit calculator, reward, update) as one
      compiled program (`learners.make_jit_grpo_step`), then replays its episodes through the
      guarded host tools for the audit log and the drift monitor.
    diversity_weight: weight of the diversity penalty in the GRPO reward: each episode loses
      `diversity_weight` times the share of its group that wrote the same text
      (`rewards.diversity_penalty`). 0 leaves the reward as it is.
    proxy_drift: the monitor that, at each evaluation point of an online RL phase, compares the
      training reward with calibration-split success and raises an alarm when the reward keeps
      rising and calibration success does not (`rewards.ProxyDriftMonitor`); alarms go to the
      metrics (`alarm/proxy_drift`) and the report (`proxy_drift`). Its window must fit the
      phase's evaluation points.
    mesh: the devices the update steps run on (`parallel.MeshConfig`): by default every device
      of every process on the `data` axis; `fsdp > 1` also splits large parameters and their
      optimizer state. Rollouts sample on each process's first device.
    rl: sync or async scheduling of the online RL phase (`RLLoopConfig`).
    rl_tasks: the training tasks the RL phase draws its prompts from: "all" of the train
      split, or "unseen_by_sft", those after the first `sft.num_demonstrations` (the ones
      SFT's demonstrations were played on), so that RL rewards what carries to functions the
      policy never imitated rather than recall of the ones it did. The train split must then
      hold more tasks than that, by a step's prompts at least.
    selfplay: `algorithm='grpo_selfplay'`: the proposals' share of each step, the proposer's
      reward and its warm start (`SelfPlayConfig`).
    sandbox_isolation: how suites that run untrusted code isolate it (`sandbox.SandboxLimits`):
      "kernel" (namespaces, read-only root, unprivileged user, seccomp and cgroup where the
      machine allows; a run that cannot apply them raises `SandboxUnavailable`), or "hook",
      the weaker audit-hook mode, only when asked for here. The report names the mode that ran.
  """
  seed: int = 0
  task: str = "calculator"
  retrieval: RetrievalSuiteConfig = RetrievalSuiteConfig()
  retrieval_expert: RetrievalExpertConfig = RetrievalExpertConfig()
  codefix: CodeFixSuiteConfig = CodeFixSuiteConfig()
  bugfix: BugFixSuiteConfig = BugFixSuiteConfig()
  bugfix_reward: BugFixRewardConfig = BugFixRewardConfig()
  keydoor: KeyDoorSuiteConfig = KeyDoorSuiteConfig()
  imagination: ImaginationConfig = ImaginationConfig()
  suite_reward: SuiteRewardConfig = SuiteRewardConfig()
  scripted_policy: str = ""
  model: TransformerConfig = dataclasses.field(default_factory=_default_model)
  init_from: str = ""
  format: str = "marker"
  chat: ChatSettings = ChatSettings()
  lora: LoraSettings = LoraSettings()
  tasks: CalculatorSuiteConfig = CalculatorSuiteConfig()
  tool_failure_rate: float = 0.2
  expert: NoisyExpertConfig = NoisyExpertConfig()
  rollout: RolloutConfig = RolloutConfig()
  reward: RewardConfig = RewardConfig()
  sft: SFTConfig = SFTConfig()
  grpo: GRPOConfig = GRPOConfig()
  eval: EvalConfig = EvalConfig()
  algorithm: str = "grpo"
  ppo: PPOAgentConfig = PPOAgentConfig()
  dpo: DPOConfig = DPOConfig()
  reward_model: RewardModelConfig = RewardModelConfig()
  soft_reward: SoftRewardConfig = SoftRewardConfig()
  preferences: PreferenceDataConfig = PreferenceDataConfig()
  sampled_token_budget: int = 0
  checkpoint_every: int = 100
  log_every: int = 10
  rollout_mode: str = "host"
  diversity_weight: float = 0.0
  proxy_drift: ProxyDriftConfig = ProxyDriftConfig()
  mesh: MeshConfig = MeshConfig()
  sandbox_isolation: str = "kernel"
  rl: RLLoopConfig = RLLoopConfig()
  rl_tasks: str = "all"
  selfplay: SelfPlayConfig = SelfPlayConfig()

  def __post_init__(self):
    # Checks of one field or of fields that always go together; what depends on the registered
    # phases and suites (and combinations of them) is `_validate.check_config`.
    if self.rollout_mode not in ROLLOUT_MODES:
      raise ValueError(f"rollout_mode must be one of {', '.join(ROLLOUT_MODES)}, got "
                       f"{self.rollout_mode!r}")
    if self.format not in FORMATS:
      raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
    if self.format != "marker" and self.rollout_mode == "jit":
      raise ValueError(f"rollout_mode='jit' runs the marker format on the built-in character "
                       f"tokenizer only; format={self.format!r} needs rollout_mode='host'")
    if self.diversity_weight < 0:
      raise ValueError(f"diversity_weight must be >= 0, got {self.diversity_weight}")
    if not self.task:
      raise ValueError("task must name a registered suite or a 'module.path:factory'")
    if self.sampled_token_budget < 0:
      raise ValueError(f"sampled_token_budget must be >= 0, got {self.sampled_token_budget}")
    if self.scripted_policy and self.scripted_policy not in POLICIES:
      raise ValueError(f"scripted_policy must be '' (train a policy) or one of "
                       f"{', '.join(POLICIES)}, got {self.scripted_policy!r}")
    if not 0 <= self.tool_failure_rate < 1:
      raise ValueError(f"tool_failure_rate must be in [0, 1), got {self.tool_failure_rate}")
    if self.checkpoint_every < 1 or self.log_every < 1:
      raise ValueError("checkpoint_every and log_every must be >= 1")
    if self.rl_tasks not in RL_TASKS:
      raise ValueError(f"rl_tasks must be one of {', '.join(RL_TASKS)}, got {self.rl_tasks!r}")
    if self.sandbox_isolation not in ("kernel", "hook"):
      raise ValueError(f"sandbox_isolation must be 'kernel' or 'hook' (weaker, explicit), got "
                       f"{self.sandbox_isolation!r}")
    if self.rollout.max_length > self.model.max_len:
      raise ValueError(f"rollout.max_length ({self.rollout.max_length}) exceeds model.max_len "
                       f"({self.model.max_len})")


def config_to_dict(config: Any) -> dict[str, Any]:
  """Nested plain dict of a config dataclass."""
  return dataclasses.asdict(config)


def _build(default: Any, values: Mapping[str, Any], path: str):
  """`default` with `values` applied, recursing into nested configs; validates on the way."""
  cls = type(default)
  hints = typing.get_type_hints(cls)
  fields = {f.name for f in dataclasses.fields(cls)}
  kwargs = {}
  for key, value in values.items():
    name = f"{path}{key}"
    if key not in fields:
      raise ConfigError(f"unknown config key '{name}'{_suggestion(key, fields)} (valid keys of "
                        f"'{path or '.'}': {', '.join(sorted(fields))})")
    if dataclasses.is_dataclass(hints[key]):
      if not isinstance(value, Mapping):
        raise ConfigError(f"config key '{name}' must be a group of settings, got {value!r}")
      kwargs[key] = _build(getattr(default, key), value, f"{name}.")
    else:
      kwargs[key] = _coerce(hints[key], value, name)
  try:
    return dataclasses.replace(default, **kwargs)
  except (ValueError, TypeError) as e:
    raise ConfigError(f"invalid config '{path.rstrip('.') or 'config'}': {e}") from e


def _suggestion(key: str, fields) -> str:
  close = difflib.get_close_matches(key, sorted(fields), n=1)
  return f", did you mean '{close[0]}'?" if close else ""


def _coerce(hint, value, name):
  if hint is bool:
    if not isinstance(value, bool):
      raise ConfigError(f"config key '{name}' must be true or false, got {value!r}")
    return value
  if hint is int:
    if isinstance(value, bool) or not isinstance(value, int):
      raise ConfigError(f"config key '{name}' must be an integer, got {value!r}")
    return value
  if hint is float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise ConfigError(f"config key '{name}' must be a number, got {value!r}")
    return float(value)
  if typing.get_origin(hint) is tuple:
    if isinstance(value, str):  # "q_proj,v_proj" from a command line
      value = tuple(part.strip() for part in value.split(",") if part.strip())
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
      raise ConfigError(f"config key '{name}' must be a list of strings, got {value!r}")
    return tuple(value)
  if hint is str and not isinstance(value, str):
    raise ConfigError(f"config key '{name}' must be a string, got {value!r}")
  return value


def config_from_dict(values: Mapping[str, Any]) -> AgentJobConfig:
  """Builds and validates an `AgentJobConfig`; missing keys keep their defaults.

  Raises:
    ConfigError: naming an unknown key, a value of the wrong type, or an impossible value.
  """
  return _build(AgentJobConfig(), values, "")


def check_config_key(dotted_key: str) -> None:
  """Raises `ConfigError` unless `dotted_key` (e.g. 'grpo.kl_beta') names a config field."""
  node: Any = AgentJobConfig()
  parts = dotted_key.split(".")
  for depth, part in enumerate(parts):
    fields = {f.name for f in dataclasses.fields(node)} if dataclasses.is_dataclass(node) else {}
    if part not in fields:
      where = ".".join(parts[:depth]) or "."
      raise ConfigError(f"unknown config key '{dotted_key}'{_suggestion(part, fields)} ('{part}' "
                        f"is not a field of '{where}'; valid: {', '.join(sorted(fields)) or 'none'})")
    node = getattr(node, part)
