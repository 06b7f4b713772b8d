"""An Elo table from evaluation games between named players (host code, not jittable).

Ratings are the maximum-likelihood Elo ratings (the Bradley-Terry model on the Elo scale) of all
the games recorded so far: P(a beats b) = 1 / (1 + 10^((r_b - r_a) / 400)), a draw counting half a
win for each side. One anchor player (e.g. 'random') is fixed at 0. Each pairing also counts one
virtual draw, so that a player who won every game gets a large but finite rating (the prior that
BayesElo uses, in its simplest form).

    table = EloTable(anchor="random")
    table.record("iter_100", "random", score=0.99, games=1000)   # score: mean of win 1 / draw 0.5
    table.record("iter_100", "minimax_4", score=0.6, games=200)
    table.ratings()                                             # {"random": 0.0, "iter_100": ...}
"""

import dataclasses
import math

import numpy as np


@dataclasses.dataclass
class EloTable:
  """Games between named players and their fitted Elo ratings.

  Attributes:
    anchor: the player rated 0.
    results: `(player_a, player_b) -> [a's points, games]`.
  """
  anchor: str = "random"
  results: dict[tuple[str, str], list[float]] = dataclasses.field(default_factory=dict)

  def record(self, player_a: str, player_b: str, *, score: float, games: int) -> None:
    """Adds `games` games of `player_a` against `player_b` in which `a` scored `score` on average
    (win 1, draw 0.5, loss 0)."""
    if player_a == player_b:
      raise ValueError(f"a player cannot play itself in the table: {player_a!r}")
    if not 0.0 <= score <= 1.0:
      raise ValueError(f"score must be the mean points per game in [0, 1], got {score}")
    if games < 1:
      raise ValueError(f"games must be >= 1, got {games}")
    if (player_b, player_a) in self.results:
      player_a, player_b, score = player_b, player_a, 1.0 - score
    points = self.results.setdefault((player_a, player_b), [0.0, 0.0])
    points[0] += score * games
    points[1] += games

  def players(self) -> list[str]:
    """Every player named in a result, and the anchor, sorted."""
    names = {self.anchor}
    for a, b in self.results:
      names.update((a, b))
    return sorted(names)

  def ratings(self, *, iterations: int = 2000) -> dict[str, float]:
    """Elo rating of every player (the anchor 0), by Newton steps on the log-likelihood."""
    names = self.players()
    index = {n: i for i, n in enumerate(names)}
    scale = math.log(10) / 400
    pairs = [(index[a], index[b], points + 0.5, games + 1.0)
             for (a, b), (points, games) in self.results.items()]
    r = np.zeros(len(names))
    free = np.array([n != self.anchor for n in names])
    for _ in range(iterations):
      grad = np.zeros(len(names))
      hess = np.zeros((len(names), len(names)))
      for i, j, points, games in pairs:
        p = 1.0 / (1.0 + math.exp(-scale * (r[i] - r[j])))
        g = scale * (points - games * p)
        grad[i] += g
        grad[j] -= g
        h = scale * scale * games * p * (1 - p)
        hess[i, i] -= h
        hess[j, j] -= h
        hess[i, j] += h
        hess[j, i] += h
      if not free.any():
        break
      sub = hess[np.ix_(free, free)] - 1e-9 * np.eye(free.sum())
      step = np.linalg.solve(sub, grad[free])
      r[free] -= step
      if np.max(np.abs(step)) < 1e-6:
        break
    return {n: float(r[index[n]]) for n in names}

  def to_json(self) -> list[list]:
    """The results as JSON-friendly rows `[a, b, points, games]`."""
    return [[a, b, points, games] for (a, b), (points, games) in self.results.items()]

  @classmethod
  def from_json(cls, rows, anchor: str = "random") -> "EloTable":
    table = cls(anchor=anchor)
    for a, b, points, games in rows:
      table.results[(a, b)] = [float(points), float(games)]
    return table
