"""Self-play GRPO (`algorithm='grpo_selfplay'`): one policy proposes tasks and solves them.

Each step, on host rollouts through the suite's guarded tools:

  PROPOSE  the policy, prompted with the suite's proposal grammar (`TaskSuite.proposals`),
           writes `round(selfplay.proposed_fraction * grpo.prompts_per_step)` proposals as its
           answers (`consolidation_fraction` instead in the phase's last
           `consolidation_steps` steps; no proposals when that rounds to 0, nor in the first
           `warmup_steps` steps). The checker
           (`tasks.ProposalChecker`) accepts those that are valid, solvable, new in this run
           and no task of (or reserved for) an evaluation split, and counts the others by
           reason; the suite's real tool computes each accepted task's answer.
  REPLAY   with `selfplay.replay_fraction`, that share of the prompts goes to proposals drawn
           from the frontier (`Frontier`: accepted proposals the solver solved sometimes, by
           their learnability), and the policy writes that many fewer proposals.
  SELECT   with `selfplay.oversample` k > 1 the policy writes k times as many proposals, and
           the solver gets as many of the accepted ones as there were prompts, drawn by the
           running learnability of their difficulty bucket (`DifficultySelector`); an accepted
           proposal left out earns its bucket's running learnability as its reward.
  SOLVE    the selected and replayed tasks, and training tasks filling the step's other
           prompts, are solved by the same policy, `grpo.group_size` episodes each, scored by
           the suite's verifiable reward; the frontier takes in the accepted and replayed
           tasks' new success rates.
  REWARD   a proposal earns its learnability for the solver (`rewards.learnability_reward` of
           its group's success rate: highest when the solver succeeds half the time), 0 when it
           was rejected.
  UPDATE   one GRPO update (`grpo.prepare_update`, the `grpo` phase's) on both roles' episodes,
           with role-conditioned advantages (`losses.role_conditioned_advantages`): each
           episode centred on its group (a solver task's group, or the step's proposals),
           scaled within its role; the proposer's then times `selfplay.proposer_weight`, and
           its KL to the reference times `selfplay.proposer_kl_weight`.

The loop audits the solver episodes, drift-monitors their rewards and logs their success; the
phase audits every proposer episode (`role: "proposer"`, with the checker's verdict, the task it
became and its difficulty) and logs `selfplay/*`: accepted and rejected counts (cumulative, by
reason: `selfplay/rejected_eval_split` shows the evaluation-split check at work), the accepted
proposals' difficulty (`selfplay/proposal_<figure>`, e.g. operands), the solver's success on
proposed and on training tasks, and the proposer's reward. Proposer tokens count against
`sampled_token_budget`. The checker's state (seen proposals and counts) is saved with each
checkpoint, so a resumed run continues exactly. At every evaluation point the loop also
evaluates `heldout_ood` when the suite has it. `selfplay.png` (`plot_selfplay`, from the audit
log) plots proposal difficulty and solver success over training.
"""

import dataclasses
import functools
import json
import os

import jax
import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import guardrails
from rlagents import losses
from rlagents import metrics as metrics_lib
from rlagents import rewards
from rlagents import rollout as rollout_lib
from rlagents import tasks as tasks_lib
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline.phases import _base
from rlagents.pipeline.phases import grpo as grpo_phase

SOLVER, PROPOSER = 0, 1


@dataclasses.dataclass
class _Context:
  update: object
  reference: object
  checker: tasks_lib.ProposalChecker
  advantages: object     # jitted (rewards, group_ids, roles) -> advantages
  frontier: "Frontier"
  selector: "DifficultySelector"


def num_replays(config) -> int:
  """Prompts a step gives to frontier proposals (when the frontier holds that many)."""
  return int(round(config.selfplay.replay_fraction * config.grpo.prompts_per_step))


def num_proposals(config, step: int | None = None, replayed: int = 0) -> int:
  """Proposals the policy writes at phase step `step` (0-based; None: outside consolidation)
  when `replayed` of the step's prompts go to frontier proposals."""
  settings = config.selfplay
  fraction = settings.proposed_fraction
  if step is not None and step >= config.grpo.num_steps - settings.consolidation_steps:
    fraction = settings.consolidation_fraction
  elif step is not None and step < settings.warmup_steps:
    return 0
  return min(int(round(fraction * config.grpo.prompts_per_step)),
             config.grpo.prompts_per_step - replayed)


class Frontier:
  """Accepted proposals the solver solved sometimes, to replay by their learnability.

  `update(texts, rates)` records each proposal's latest solver success rate p: one with
  0 < p < 1 is (re)scored with its learnability, one with p = 0 or 1 leaves. `sample` draws
  distinct proposals with probability proportional to their score (prioritised level
  replay over the policy's own proposals). Beyond `capacity` the lowest score, then the
  oldest, leaves first.
  """

  def __init__(self, capacity: int, kind: str = "variance", peak: float = 0.5):
    self.capacity, self.kind, self.peak = capacity, kind, peak
    self.entries: dict[str, tuple[float, int]] = {}   # proposal text -> (score, step)

  def __len__(self):
    return len(self.entries)

  def update(self, texts, rates, step: int) -> None:
    rates = np.asarray(rates, np.float32)
    if not len(texts):
      return
    scores = np.asarray(rewards.learnability_reward(rates, np.ones(len(texts), bool),
                                                    kind=self.kind, peak=self.peak))
    for text, rate, score in zip(texts, rates, scores):
      if 0.0 < rate < 1.0:
        self.entries[text] = (float(score), int(step))
      else:
        self.entries.pop(text, None)
    if len(self.entries) > self.capacity:
      keep = sorted(self.entries.items(), key=lambda kv: (kv[1][0], kv[1][1]), reverse=True)
      self.entries = dict(keep[:self.capacity])

  def sample(self, rng: np.random.Generator, count: int) -> list[str]:
    texts = sorted(self.entries)
    count = min(count, len(texts))
    if not count:
      return []
    scores = np.array([self.entries[t][0] for t in texts], np.float64)
    chosen = rng.choice(len(texts), count, replace=False, p=scores / scores.sum())
    return [texts[i] for i in chosen]

  def state(self) -> dict:
    return {"entries": [[t, score, step] for t, (score, step) in sorted(self.entries.items())]}

  def load(self, state) -> None:
    self.entries = {t: (float(score), int(step)) for t, score, step in state["entries"]}


class DifficultySelector:
  """Which accepted proposals the solver gets, by how learnable their difficulty has been.

  Proposals fall into buckets by their difficulty figures (`grammar.difficulty`, the names in
  `keys`, all of them when empty: for the calculator e.g. operands and largest number of
  digits). Each bucket keeps a running mean of the learnability its solved proposals earned
  (an exponential mean with rate `rate` per proposal); a bucket never solved scores
  `UNSEEN_SCORE`, so it is tried. `select` draws proposals without replacement with
  probability proportional to their bucket's score plus `FLOOR`, so every bucket keeps a
  chance. `estimate` gives a proposal its bucket's score: the reward of a proposal that was not
  solved.
  """
  UNSEEN_SCORE, FLOOR = 1.0, 0.05

  def __init__(self, keys=(), rate: float = 0.05):
    self.keys, self.rate = tuple(keys), float(rate)
    self.buckets: dict[str, list] = {}   # bucket -> [mean learnability, proposals solved]

  def bucket(self, figures) -> str:
    names = self.keys or tuple(sorted(figures))
    missing = [name for name in names if name not in figures]
    if missing:
      raise ValueError(f"selfplay.select_by names {missing}, which the suite's "
                       f"ProposalGrammar.difficulty does not give (it gives {sorted(figures)})")
    return json.dumps([[name, round(float(figures[name]), 6)] for name in names])

  def estimate(self, bucket: str) -> float:
    entry = self.buckets.get(bucket)
    return self.UNSEEN_SCORE if entry is None else entry[0]

  def update(self, buckets, learnability) -> None:
    for bucket, value in zip(buckets, learnability):
      entry = self.buckets.get(bucket)
      if entry is None:
        self.buckets[bucket] = [float(value), 1]
      else:
        entry[0] += self.rate * (float(value) - entry[0])
        entry[1] += 1

  def select(self, rng: np.random.Generator, buckets, count: int) -> list[int]:
    """Indices of `count` of the proposals (with these buckets) to solve, in draw order."""
    count = min(count, len(buckets))
    if not count:
      return []
    weights = np.array([self.estimate(b) + self.FLOOR for b in buckets], np.float64)
    return [int(i) for i in rng.choice(len(buckets), count, replace=False,
                                       p=weights / weights.sum())]

  def state(self) -> dict:
    return {"buckets": [[b, v, n] for b, (v, n) in sorted(self.buckets.items())]}

  def load(self, state) -> None:
    self.buckets = {b: [float(v), int(n)] for b, v, n in state["buckets"]}


def proposer_kl_weight(config, step: int) -> float:
  """The factor on the proposer's KL at phase step `step` (0-based): `proposer_kl_weight`,
  fading linearly to 1 over the first `proposer_kl_fade_steps` steps when that is > 0."""
  weight, fade = config.selfplay.proposer_kl_weight, config.selfplay.proposer_kl_fade_steps
  if not fade:
    return float(weight)
  return float(1.0 + (weight - 1.0) * max(0.0, 1.0 - step / fade))


def weighted_advantages(advantages_fn, rewards, groups, roles, *, proposer_weight: float):
  """`advantages_fn(rewards, groups, roles)` (role-conditioned advantages) as a float32 array,
  the proposer's entries times `proposer_weight`."""
  advantages = np.array(advantages_fn(rewards, groups, roles), np.float32)
  advantages[np.asarray(roles) == PROPOSER] *= proposer_weight
  return advantages


def _grammar(job) -> tasks_lib.ProposalGrammar:
  grammar = job.suite.proposals
  if grammar is None:
    raise job_lib.JobError(f"algorithm='grpo_selfplay': task suite {job.suite.name!r} gives no "
                           "proposal grammar (TaskSuite.proposals)")
  return grammar


def _checker(job) -> tasks_lib.ProposalChecker:
  """A checker of the suite's proposals against every evaluation split's tasks."""
  return tasks_lib.ProposalChecker(
      _grammar(job), {split: job.suite.splits[split] for split in job.suite.eval_splits})


def proposer_episode(task: tasks_lib.ProposerTask, text: str) -> episodes_lib.Episode:
  """A proposer episode that answers `task` with the proposal `text` (a demonstration)."""
  segment = episodes_lib.ANSWER_OPEN + text + episodes_lib.ANSWER_CLOSE
  return episodes_lib.Episode(task, [episodes_lib.Action(segment, "answer")], answer=text,
                              done=True)


class GRPOSelfPlay(_base.Phase):
  """GRPO on the policy's own proposals and training tasks (`config.grpo`, `config.selfplay`)."""
  name, phase_id, online = "grpo_selfplay", 3, True

  def settings(self, config):
    return config.grpo

  def validate(self, config):
    if num_proposals(config) < 1:
      return (f"selfplay.proposed_fraction={config.selfplay.proposed_fraction} of "
              f"grpo.prompts_per_step={config.grpo.prompts_per_step} rounds to no proposal per "
              "step; raise either")
    if num_replays(config) >= config.grpo.prompts_per_step:
      return (f"selfplay.replay_fraction={config.selfplay.replay_fraction} of "
              f"grpo.prompts_per_step={config.grpo.prompts_per_step} leaves no prompt for a "
              "proposal; lower it")
    if 0 < config.grpo.num_steps <= (config.selfplay.warmup_steps
                                     + config.selfplay.consolidation_steps):
      return (f"selfplay.warmup_steps={config.selfplay.warmup_steps} and "
              f"selfplay.consolidation_steps={config.selfplay.consolidation_steps} leave no "
              f"self-play step of grpo.num_steps={config.grpo.num_steps}; lower it")
    if config.selfplay.proposer_kl_weight != 1.0 and not config.grpo.kl_beta:
      return (f"selfplay.proposer_kl_weight={config.selfplay.proposer_kl_weight} scales the KL "
              "term, which grpo.kl_beta=0 turns off; set grpo.kl_beta > 0")
    if config.diversity_weight:
      return (f"algorithm='grpo_selfplay' does not support diversity_weight="
              f"{config.diversity_weight}")
    if config.selfplay.proposer_demonstrations == 0 and not config.init_from:
      return ("algorithm='grpo_selfplay' from the built-in model needs proposer examples in SFT "
              "(selfplay.proposer_demonstrations > 0): it cannot write a proposal otherwise")
    return None

  def warm_start_tasks(self, job, rng):
    count = job.config.selfplay.solver_demonstrations
    if not count:
      return []
    grammar = _grammar(job)
    train = job.suite.splits["train"]
    texts = grammar.demonstrations([train[i] for i in rng.choice(len(train), count)], rng)
    # Never an evaluation task: the checker's rule, with repeats allowed (they are examples).
    checker = _checker(job)
    kept = [grammar.to_task(t) for t in texts if checker.check(t).reason in ("", "duplicate")]
    print(f"solver examples: {len(kept)} of {len(texts)} kept "
          f"({json.dumps({k: v for k, v in checker.counts.items() if v})})", flush=True)
    return kept

  def warm_start_demonstrations(self, job, rng):
    grammar = _grammar(job)
    train = job.suite.splits["train"]
    settings = job.config.selfplay
    count = settings.proposer_demonstrations
    sources = [train[i] for i in rng.choice(len(train), count, replace=count > len(train))]
    composed = round(settings.composed_demonstrations * count)
    texts = grammar.demonstrations(sources[composed:], rng)
    if composed:
      if grammar.compose is None:
        raise job_lib.JobError(
            f"selfplay.composed_demonstrations={settings.composed_demonstrations}: task suite "
            f"{job.suite.name!r} gives no composition (ProposalGrammar.compose)")
      seconds = rng.choice(len(train), composed)
      texts = [grammar.compose(first, train[j], rng)
               for first, j in zip(sources[:composed], seconds)] + texts
    # An example may never be an evaluation task, nor one the policy could not propose.
    checker = _checker(job)
    kept = [t for t in texts if checker.check(t).reason in ("", "duplicate")]
    if len(kept) < len(texts):
      print(f"proposer examples: dropped {len(texts) - len(kept)} of {len(texts)} "
            f"({json.dumps({k: v for k, v in checker.counts.items() if v and k != 'accepted'})})",
            flush=True)
    return [proposer_episode(tasks_lib.ProposerTask(f"proposer-demo-{i}", grammar.prompt), text)
            for i, text in enumerate(kept)]

  def prepare(self, job, state, reference):
    update, reference = grpo_phase.prepare_update(job, reference)
    checker = _checker(job)
    advantages = jax.jit(functools.partial(
        losses.role_conditioned_advantages, num_groups=job.config.grpo.prompts_per_step + 1,
        num_roles=2, epsilon=job.config.grpo.advantage_epsilon))
    frontier = Frontier(job.config.selfplay.replay_capacity, job.config.selfplay.learnability,
                        job.config.selfplay.learnability_peak)
    selector = DifficultySelector(job.config.selfplay.select_by)
    return _Context(update, reference, checker, advantages, frontier, selector)

  def step(self, job, context, state, *, step, key, rng):
    config, grpo = job.config, job.config.grpo
    grammar, checker = job.suite.proposals, context.checker
    propose_key, solve_key = jax.random.split(key)

    # REPLAY frontier proposals (none while the frontier is empty or replay_fraction is 0)
    replayed_texts = context.frontier.sample(rng, num_replays(config))
    replayed = [grammar.to_task(text) for text in replayed_texts]

    # PROPOSE (none in consolidation steps with consolidation_fraction 0)
    slots = num_proposals(config, step, len(replayed))
    prompts = [tasks_lib.ProposerTask(f"proposer-{step}-{i}", grammar.prompt)
               for i in range(slots * config.selfplay.oversample)]
    proposals, verdicts = None, []
    if prompts:
      proposals = rollout_lib.sample_episodes(
          job.policy_params(state.params), prompts, sampler=job.sampler,
          tokenizer=job.tokenizer, toolbox_for=job.suite.toolbox_for, config=config.rollout,
          key=propose_key, rng=rng)
      verdicts = [checker.check(episode.answer) for episode in proposals.episodes]
    # SELECT: with oversampling, `slots` of the accepted proposals by their bucket's score
    accepted_at = [i for i, v in enumerate(verdicts) if v.accepted]
    solved_at, buckets = accepted_at, {}
    if config.selfplay.oversample > 1:
      buckets = {i: context.selector.bucket(grammar.difficulty(verdicts[i].task))
                 for i in accepted_at}
      chosen = context.selector.select(rng, [buckets[i] for i in accepted_at], slots)
      solved_at = [accepted_at[j] for j in chosen]
    proposed = [verdicts[i].task for i in solved_at]

    # SOLVE
    solver_tasks = proposed + replayed + self.draw_tasks(
        job, rng, grpo.prompts_per_step - len(proposed) - len(replayed))
    group_tasks = [task for task in solver_tasks for _ in range(grpo.group_size)]
    solved = job.train_episodes(state.params, group_tasks, key=solve_key, rng=rng,
                                group_size=grpo.group_size)
    success = np.array([e.reward_terms["correct_answer"] for e in solved.episodes],
                       np.float32).reshape(grpo.prompts_per_step, grpo.group_size).mean(axis=1)

    # REWARD
    rates = np.zeros(len(verdicts), np.float32)
    rates[solved_at] = success[:len(proposed)]
    accepted = np.array([v.accepted for v in verdicts], bool)
    if config.selfplay.replay_fraction:
      context.frontier.update(
          [proposals.episodes[i].answer.strip() for i in solved_at]
          + replayed_texts, success[:len(proposed) + len(replayed)], step)
    proposer_rewards = np.array(rewards.learnability_reward(
        rates, accepted, kind=config.selfplay.learnability,
        peak=config.selfplay.learnability_peak))
    unsolved = sorted(set(accepted_at) - set(solved_at))
    if buckets:
      context.selector.update([buckets[i] for i in solved_at], proposer_rewards[solved_at])
      # An accepted proposal the solver did not get earns its bucket's running learnability.
      proposer_rewards[unsolved] = [context.selector.estimate(buckets[i]) for i in unsolved]
    if prompts:
      self._score_proposals(job, proposals.episodes, verdicts, rates, proposer_rewards, step,
                            unsolved=set(unsolved))

    # UPDATE
    solver_rewards = np.array([e.reward for e in solved.episodes], np.float32)
    all_rewards = np.concatenate([solver_rewards, proposer_rewards])
    groups = np.concatenate([np.repeat(np.arange(grpo.prompts_per_step), grpo.group_size),
                             np.full(len(prompts), grpo.prompts_per_step)]).astype(np.int32)
    roles = np.concatenate([np.full(len(solver_rewards), SOLVER),
                            np.full(len(prompts), PROPOSER)]).astype(np.int32)
    parts = [solved] + ([proposals] if prompts else [])
    advantages = weighted_advantages(context.advantages, all_rewards, groups, roles,
                                     proposer_weight=config.selfplay.proposer_weight)
    batch = {
        "tokens": np.concatenate([p.tokens for p in parts]),
        "loss_mask": np.concatenate([p.loss_mask for p in parts]),
        "old_logprobs": np.concatenate([p.logprobs for p in parts]),
        "advantages": advantages,
    }
    if config.selfplay.proposer_kl_weight != 1.0:
      # Present in every step of such a run (also once a fade reaches 1), so the update's
      # batch keeps one structure and compiles once.
      batch["kl_weights"] = np.where(roles == PROPOSER, proposer_kl_weight(config, step),
                                     1.0).astype(np.float32)
    batch = self._pad(job, batch)
    for _ in range(grpo.updates_per_batch):
      state, metrics = context.update(state, context.reference, batch)
    proposer_tokens = int(proposals.loss_mask.sum()) if prompts else 0
    extra = self._metrics(job, checker, verdicts, proposed, success, proposer_rewards,
                          proposer_tokens, len(replayed))
    if config.selfplay.oversample > 1:
      extra["selfplay/unsolved_accepted"] = float(len(unsolved))
    if config.selfplay.replay_fraction:
      extra["selfplay/frontier_size"] = float(len(context.frontier))
    return _base.StepResult(state, metrics, solved, extra_metrics=extra,
                            extra_sampled_tokens=proposer_tokens)

  def _score_proposals(self, job, episodes, verdicts, rates, proposer_rewards, step,
                       unsolved=frozenset()):
    """Sets each proposer episode's reward and terms, and writes it to the audit log (an
    accepted proposal the solver did not get has verdict 'unselected', no solver success, and
    its bucket's estimate as learnability)."""
    grammar = job.suite.proposals
    for i, (episode, verdict, rate, reward) in enumerate(
        zip(episodes, verdicts, rates, proposer_rewards)):
      episode.reward = float(reward)
      episode.reward_terms = {"accepted": float(verdict.accepted),
                              "solver_success": float(rate), "learnability": float(reward)}
      fields = {"verdict": verdict.reason or "accepted"}
      if i in unsolved:
        fields["verdict"] = "unselected"
        del episode.reward_terms["solver_success"]
      if verdict.accepted:
        episode.reward_terms.update(grammar.difficulty(verdict.task))
        fields["proposed_task_id"] = verdict.task.task_id
      if verdict.split:
        fields["eval_split"] = verdict.split
      job.outputs.episodes([episode], phase=self.name, step=job.sft_steps + step + 1,
                           policy="policy", role="proposer", **fields)

  @staticmethod
  def _pad(job, batch):
    """Zero rows (no policy tokens, zero advantage) up to a multiple of the update's
    micro-batch (or of the mesh's devices), which the two roles' rows need not fill."""
    multiple = job.config.grpo.microbatch_size or job.mesh.devices.size
    missing = -len(batch["tokens"]) % multiple
    if not missing:
      return batch
    return {k: np.concatenate([v, np.zeros((missing,) + v.shape[1:], v.dtype)])
            for k, v in batch.items()}

  @staticmethod
  def _metrics(job, checker, verdicts, proposed, success, proposer_rewards, proposer_tokens,
               replayed=0):
    values = {"selfplay/proposals": float(len(verdicts)),
              "selfplay/proposer_tokens": float(proposer_tokens)}
    if verdicts:
      values["selfplay/accepted_fraction"] = float(np.mean([v.accepted for v in verdicts]))
      values["selfplay/proposer_reward"] = float(np.mean(proposer_rewards))
    # Cumulative over the phase: how many proposals each check has turned away so far.
    values.update({f"selfplay/rejected_{reason}": float(checker.counts[reason])
                   for reason in tasks_lib.REJECTIONS})
    if len(proposed) + replayed < len(success):
      values["selfplay/train_task_success"] = float(np.mean(success[len(proposed) + replayed:]))
    if replayed:
      values["selfplay/replayed"] = float(replayed)
      values["selfplay/replayed_success"] = float(
          np.mean(success[len(proposed):len(proposed) + replayed]))
    if proposed:
      values["selfplay/proposed_success"] = float(np.mean(success[:len(proposed)]))
      figures = [job.suite.proposals.difficulty(task) for task in proposed]
      for name in figures[0]:
        values[f"selfplay/proposal_{name}"] = float(np.mean([f[name] for f in figures]))
    return values

  def checkpoint_metadata(self, context):
    return {"selfplay_checker": context.checker.state(),
            "selfplay_frontier": context.frontier.state(),
            "selfplay_selector": context.selector.state()}

  def restore(self, context, metadata):
    if "selfplay_checker" in metadata:
      context.checker.load(metadata["selfplay_checker"])
    if "selfplay_frontier" in metadata:
      context.frontier.load(metadata["selfplay_frontier"])
    if "selfplay_selector" in metadata:
      context.selector.load(metadata["selfplay_selector"])

  def extra_curve_splits(self, job):
    return ("heldout_ood",) if "heldout_ood" in job.suite.eval_splits else ()

  def panels(self, config):
    return {"KL to SFT": ["grpo/kl"], **_PANELS}

  def finish(self, job, context):
    if context is None:
      return {}
    if job.outputs.primary:
      plot_selfplay(job.workdir, os.path.join(job.workdir, "selfplay.png"))
    counts = context.checker.state()
    return {"selfplay": {"proposals": counts["counts"],
                         "eval_split_discards": counts["eval_split_counts"]}}


def _rolling(steps, values, window):
  """Steps and the mean of `values` over the last `window` steps (per-step means first)."""
  by_step = {}
  for step, value in zip(steps, values):
    by_step.setdefault(step, []).append(value)
  keys = sorted(by_step)
  means = np.array([np.mean(by_step[k]) for k in keys])
  smooth = [means[max(0, i - window + 1):i + 1].mean() for i in range(len(means))]
  return np.array(keys), np.array(smooth)


def plot_selfplay(workdir: str, png_path: str, *, window: int = 10) -> None:
  """Proposal difficulty and solver success over a self-play run, from its audit log (every
  proposal of every step, means over `window` steps) and its held-out curves (metrics.csv).

  Args:
    workdir: the run's workdir (`audit/episodes.jsonl`, `metrics.csv`).
    png_path: where the PNG goes.
    window: steps per rolling mean.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  records = [r for r in guardrails.read_audit_log(
      os.path.join(workdir, "audit", "episodes.jsonl"))
             if r.get("role") == "proposer" and r["phase"] == GRPOSelfPlay.name]
  accepted = [r for r in records if r["verdict"] == "accepted"]
  rows = metrics_lib.read_csv(os.path.join(workdir, "metrics.csv"))
  fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
  figures = sorted({k for r in accepted for k in r["reward_terms"]} - set(_TERMS))
  for name in figures:
    axes[0].plot(*_rolling([r["step"] for r in accepted],
                           [r["reward_terms"][name] for r in accepted], window), label=name)
  axes[0].set_title(f"accepted proposals (mean over {window} steps)")
  axes[1].plot(*_rolling([r["step"] for r in accepted],
                         [r["reward_terms"]["solver_success"] for r in accepted], window),
               label="solver on proposals")
  for name in ("eval/heldout_success", "eval/heldout_ood_success"):
    points = sorted((row["step"], row["value"]) for row in rows if row["name"] == name)
    if points:
      axes[1].plot(*zip(*points), marker=".", label=name.split("/")[1])
  axes[1].set_title("solver success")
  axes[1].set_ylim(-0.02, 1.02)
  axes[2].plot(*_rolling([r["step"] for r in records],
                         [r["verdict"] == "accepted" for r in records], window),
               label="accepted fraction")
  axes[2].plot(*_rolling([r["step"] for r in records], [r["reward"] for r in records], window),
               label="proposer reward")
  axes[2].set_title("proposals")
  for ax in axes:
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if ax.lines:
      ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(png_path, dpi=100)
  plt.close(fig)


# The proposer's reward terms that are not difficulty figures.
_TERMS = ("accepted", "solver_success", "learnability")
_PANELS = {
    "self-play: proposal difficulty": ["selfplay/proposal_operands",
                                       "selfplay/proposal_max_digits"],
    "self-play: solver success": ["selfplay/proposed_success", "selfplay/train_task_success",
                                  "eval/heldout_success", "eval/heldout_ood_success"],
}

GRPO_SELFPLAY_PHASE = _base.register_phase(GRPOSelfPlay())
