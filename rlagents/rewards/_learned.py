"""Soft rewards: a learned scorer (e.g. a reward model) as a reward term beside the verifiable gate.

Host code. The composed reward of an episode is

    reward = verifiable reward (gate + shaping, `compose_reward`) + weight * normalize(score)

where `score` is any learned scorer's output for the episode (`rlagents.learners` trains a
Bradley-Terry reward model). A raw reward-model score has an arbitrary offset and scale, so it is
normalized before it is weighted:

    'none':    the score as is
    'group':   z-score within each group of `group_size` episodes of the same prompt (what the
               group-relative advantage sees anyway; with PPO it ranks a prompt's episodes)
    'running': z-score with a running mean and variance over every score seen so far (a batch
               is normalized with the statistics that include it)

and optionally clipped to [-clip, clip]. The raw and normalized scores are logged as terms
('learned_score', 'learned_term') beside the verifiable ones.
"""

import dataclasses

import numpy as np

NORMALIZATIONS = ("none", "group", "running")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SoftRewardConfig:
  """The learned-scorer term of the reward.

  Attributes:
    weight: weight of the normalized score (0: no learned term; the job then trains no reward
      model).
    normalization: 'none', 'group' or 'running' (see the module docstring).
    clip: clip the normalized score to [-clip, clip] (0: no clipping).
    epsilon: added to the standard deviation.
  """
  weight: float = 0.0
  normalization: str = "running"
  clip: float = 3.0
  epsilon: float = 1e-6

  def __post_init__(self):
    if self.weight < 0:
      raise ValueError(f"SoftRewardConfig.weight must be >= 0, got {self.weight}")
    if self.normalization not in NORMALIZATIONS:
      raise ValueError(f"SoftRewardConfig.normalization must be one of "
                       f"{', '.join(NORMALIZATIONS)}, got {self.normalization!r}")
    if self.clip < 0 or self.epsilon <= 0:
      raise ValueError("SoftRewardConfig.clip must be >= 0 and epsilon > 0")


class RunningMeanStd:
  """Mean and variance over every value seen (Chan et al.'s parallel update)."""

  def __init__(self):
    self.count = 0
    self.mean = 0.0
    self.var = 0.0

  def update(self, values: np.ndarray) -> None:
    values = np.asarray(values, np.float64).ravel()
    if not len(values):
      return
    n, mean, var = len(values), values.mean(), values.var()
    total = self.count + n
    delta = mean - self.mean
    self.var = (self.count * self.var + n * var + delta**2 * self.count * n / total) / total
    self.mean += delta * n / total
    self.count = total

  def state(self) -> dict[str, float]:
    return {"count": self.count, "mean": self.mean, "var": self.var}

  def load(self, state: dict[str, float]) -> None:
    self.count, self.mean, self.var = int(state["count"]), float(state["mean"]), float(state["var"])


def normalize_scores(scores: np.ndarray, config: SoftRewardConfig, *, group_size: int = 1,
                     running: RunningMeanStd | None = None) -> np.ndarray:
  """The normalized (and clipped) scores `[N]`; updates `running` for 'running'."""
  scores = np.asarray(scores, np.float64)
  if config.normalization == "group":
    if group_size < 2 or len(scores) % group_size:
      raise ValueError(f"'group' normalization needs groups of >= 2 that divide the batch; got "
                       f"group_size={group_size} for {len(scores)} episodes")
    grouped = scores.reshape(-1, group_size)
    normalized = ((grouped - grouped.mean(axis=1, keepdims=True))
                  / (grouped.std(axis=1, keepdims=True) + config.epsilon)).ravel()
  elif config.normalization == "running":
    if running is None:
      raise ValueError("'running' normalization needs a RunningMeanStd")
    running.update(scores)
    normalized = (scores - running.mean) / (np.sqrt(running.var) + config.epsilon)
  else:
    normalized = scores
  if config.clip:
    normalized = np.clip(normalized, -config.clip, config.clip)
  return normalized


def add_learned_reward(episodes, scores: np.ndarray, config: SoftRewardConfig, *,
                       group_size: int = 1, running: RunningMeanStd | None = None) -> None:
  """Adds `weight * normalize(score)` to each scored episode's reward and logs both terms."""
  if len(scores) != len(episodes):
    raise ValueError(f"{len(scores)} scores for {len(episodes)} episodes")
  normalized = normalize_scores(scores, config, group_size=group_size, running=running)
  for episode, raw, term in zip(episodes, scores, normalized):
    episode.reward_terms["learned_score"] = float(raw)
    episode.reward_terms["learned_term"] = float(term)
    episode.reward += config.weight * float(term)
