r"""Self-play throughput, side by side: our learner's self-play vs a raw pgx + mctx loop.

    python benchmarks/selfplay.py --json=/tmp/selfplay.json

Both sides play `--num_games` Connect Four games for `--num_moves` moves each (a finished game
restarts in its slot), with a Gumbel MuZero search over the true game before every move, the same
`PolicyValueNet` and parameters, at each of `--simulations`; each records the observation and the
search policy of every move. Ours is `AlphaZeroLearner.self_play` (league off): per-game keys,
the `rlagents.envs` adapter, the game's outcome targets computed after the loop. The peer is the
loop pgx's AlphaZero example writes: `pgx.make('connect_four')` stepped under `vmap`, one batched
`mctx.gumbel_muzero_policy` call per move, auto-reset with `jnp.where`.

Measured: self-play moves per second (one search per move, so also searches per second) without
compile, in `--rounds` interleaved rounds (ours, peer, ours, peer, ...), each round the median of
`--repeats` calls; reported as the median of the per-round ratios ours / peer with min and max.
Then the whole learner iteration (self-play + replay + updates) on 1 device vs 2 forced host
devices (`shard_map` through `rlagents.parallel`), interleaved the same way.

Prints the figures and writes them to `--json`; it never fails on a time.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_force_host_platform_device_count=2").strip()

import json
import platform
import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import mctx
import pgx

from rlagents import parallel
from rlagents import search
from rlagents.learners import alphazero
from rlagents.metrics import cpu_model

_NUM_GAMES = flags.DEFINE_integer("num_games", 256, "Games played side by side.")
_NUM_MOVES = flags.DEFINE_integer("num_moves", 42, "Moves per game slot per call.")
_SIMULATIONS = flags.DEFINE_list("simulations", ["32", "128"], "Search simulations to measure.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved rounds.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Calls per side per round (median).")
_HIDDEN = flags.DEFINE_list("hidden_sizes", ["128", "128"], "The network's dense widths.")
_DEVICES = flags.DEFINE_boolean("devices", True, "Also time 1 vs 2 forced devices.")
_JSON = flags.DEFINE_string("json", None, "Write the figures here too.")


def raw_pgx_mctx_self_play(network, num_games: int, num_moves: int, num_simulations: int):
  """The peer: pgx + mctx used directly, in the style of pgx's examples/alphazero/train.py."""
  env = pgx.make("connect_four")

  def masked(logits, legal):
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    return jnp.where(legal, logits, jnp.finfo(logits.dtype).min)

  def recurrent_fn(params, key, action, state):
    del key
    player = state.current_player
    state = jax.vmap(env.step)(state, action)
    logits, value = network.apply(params, state.observation.astype(jnp.float32))
    reward = state.rewards[jnp.arange(state.rewards.shape[0]), player]
    value = jnp.where(state.terminated, 0.0, value)
    discount = jnp.where(state.terminated, 0.0, -1.0)
    return mctx.RecurrentFnOutput(reward=reward, discount=discount,
                                  prior_logits=masked(logits, state.legal_action_mask),
                                  value=value), state

  def play(params, key):
    init_key, key = jax.random.split(key)
    state = jax.vmap(env.init)(jax.random.split(init_key, num_games))

    def move(state, key):
      search_key, reset_key = jax.random.split(key)
      logits, value = network.apply(params, state.observation.astype(jnp.float32))
      root = mctx.RootFnOutput(prior_logits=masked(logits, state.legal_action_mask), value=value,
                               embedding=state)
      out = mctx.gumbel_muzero_policy(params, search_key, root, recurrent_fn,
                                      num_simulations=num_simulations,
                                      invalid_actions=~state.legal_action_mask)
      obs = state.observation
      player = state.current_player
      state = jax.vmap(env.step)(state, out.action)
      reward = state.rewards[jnp.arange(num_games), player]
      fresh = jax.vmap(env.init)(jax.random.split(reset_key, num_games))
      done = state.terminated
      state = jax.tree.map(
          lambda a, b: jnp.where(done.reshape(done.shape + (1,) * (a.ndim - 1)), a, b),
          fresh, state)
      return state, (obs, out.action_weights, reward, done)

    _, trajectory = jax.lax.scan(move, state, jax.random.split(key, num_moves))
    return trajectory

  return jax.jit(play)


def _time(fn, *args) -> float:
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - start


def _interleaved(sides: dict, rounds: int, repeats: int) -> dict:
  """Median seconds per call of each side in each round, the sides taking turns."""
  times = {name: [] for name in sides}
  for _ in range(rounds):
    for name, (fn, args) in sides.items():
      times[name].append(statistics.median(_time(fn, *args) for _ in range(repeats)))
  return times


def _ratio_stats(numerator, denominator):
  ratios = [n / d for n, d in zip(numerator, denominator)]
  return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def main(argv):
  del argv
  hidden = tuple(int(h) for h in _HIDDEN.value)
  results = {"cpu": cpu_model(), "python": platform.python_version(), "jax": jax.__version__,
             "pgx": pgx.__version__, "mctx": mctx.__version__, "num_games": _NUM_GAMES.value,
             "num_moves": _NUM_MOVES.value, "hidden_sizes": hidden, "threads": os.cpu_count(),
             "self_play": {}}
  moves = _NUM_GAMES.value * _NUM_MOVES.value
  print(f"CPU {results['cpu']}; jax {jax.__version__}, pgx {pgx.__version__}, mctx "
        f"{mctx.__version__}; {_NUM_GAMES.value} games x {_NUM_MOVES.value} moves per call")
  for sims in (int(s) for s in _SIMULATIONS.value):
    config = alphazero.AlphaZeroConfig(
        num_games=_NUM_GAMES.value, num_moves=_NUM_MOVES.value, hidden_sizes=hidden,
        league_size=0, search=search.SearchConfig(num_simulations=sims))
    learner = alphazero.make_learner(config)
    params = learner.init(jax.random.key(0)).params
    ours = jax.jit(learner.self_play)
    game_keys = jax.random.key_data(jax.random.split(jax.random.key(1), _NUM_GAMES.value))
    peer = raw_pgx_mctx_self_play(learner.network, _NUM_GAMES.value, _NUM_MOVES.value, sims)
    compile_s = {"ours": _time(ours, params, game_keys),
                 "peer": _time(peer, params, jax.random.key(1))}
    times = _interleaved({"ours": (ours, (params, game_keys)),
                          "peer": (peer, (params, jax.random.key(1)))},
                         _ROUNDS.value, _REPEATS.value)
    rate = {k: [moves / t for t in v] for k, v in times.items()}
    stats = _ratio_stats(rate["ours"], rate["peer"])
    results["self_play"][sims] = {"moves_per_s": rate, "ratio": stats,
                                  "first_call_s": compile_s}
    print(f"{sims:>4d} simulations: ours {statistics.median(rate['ours']):9.0f} moves/s, "
          f"raw pgx+mctx {statistics.median(rate['peer']):9.0f} moves/s (= searches/s); ours / "
          f"peer {stats['median']:.3f} [{stats['min']:.3f}, {stats['max']:.3f}]; first calls "
          f"{compile_s['ours']:.1f} s / {compile_s['peer']:.1f} s")

  if _DEVICES.value and jax.device_count() >= 2:
    config = alphazero.AlphaZeroConfig(
        num_games=_NUM_GAMES.value, num_moves=_NUM_MOVES.value, hidden_sizes=hidden,
        search=search.SearchConfig(num_simulations=int(_SIMULATIONS.value[0])))
    learner = alphazero.make_learner(config)
    one = jax.jit(learner.iteration)
    mesh = parallel.make_mesh(parallel.MeshConfig(data=2), devices=jax.devices()[:2])
    _, two = alphazero.make_data_parallel_iteration(config, mesh)
    state = learner.init(jax.random.key(0))
    compile_s = {"1 device": _time(one, state), "2 devices": _time(two, state)}
    times = _interleaved({"1 device": (one, (state,)), "2 devices": (two, (state,))},
                         _ROUNDS.value, _REPEATS.value)
    stats = _ratio_stats(times["1 device"], times["2 devices"])
    results["devices"] = {"iteration_s": times, "speedup_2_over_1": stats,
                          "first_call_s": compile_s}
    print(f"iteration ({config.search.num_simulations} simulations, league on): 1 device "
          f"{statistics.median(times['1 device']):.2f} s, 2 forced devices "
          f"{statistics.median(times['2 devices']):.2f} s; speed-up {stats['median']:.2f} "
          f"[{stats['min']:.2f}, {stats['max']:.2f}]")
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  app.run(main)
