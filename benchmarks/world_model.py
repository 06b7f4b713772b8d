r"""World model vs model-free: Dreamer and our PPO side by side, in real environment steps.

    python benchmarks/world_model.py --json=/tmp/world_model.json
    python benchmarks/world_model.py --envs=cartpole --seeds=8 --json=/tmp/wm_cartpole.json

For each environment (`--envs`: 'cartpole', 'procmaze'), one after the other in this process:

- real steps to the target, per seed: the first iteration after which the rolling mean over
  the last 100 episodes (second figure: over the last 10; a rolling-100 return of 475 needs at
  least 47,500 real steps in its window whatever the learner) reaches the target (CartPole:
  return 475; maze: success 0.95), for
  PPO (the settings of experiments/configs/control.py) and Dreamer (the same file's Dreamer
  settings), `--seeds` seeds vmapped in one program each; the ratio is PPO's median over
  Dreamer's median (above 1: Dreamer needs fewer real steps), given only when more than half
  the seeds of each side reached the target; every seed's figure is printed (None: not
  reached);
- wall time of each program with compilation (context: Dreamer spends compute to save real steps);
- the maze's success on held-out layouts (never trained on) of each seed's final policy,
  sampling, 64 episodes;
- the world model's open-loop prediction error on held-out real trajectories (fresh episodes of
  the trained actor, seed 0): from a posterior filtered up to step t, the model imagines with the
  real actions and its predictions at t + 1, 5, 15 are compared with the real ones: observation
  mean absolute error, reward absolute error, continue accuracy;
- Dreamer's gradient steps per second (model + actor-critic updates, collection included),
  compiled, one seed and `--seeds` seeds vmapped, median [min, max] over `--repeats` rounds.

The ratio of steps is not a timing, so load does not move it; wall times are context only.
Prints the figures and writes them to `--json`; it never fails on a time.
"""

import json
import platform
import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments.configs import control as control_configs
from rlagents import envs
from rlagents import world_models
from rlagents.learners import dreamer
from rlagents.learners import ppo
from rlagents.metrics import cpu_model

_ENVS = flags.DEFINE_list("envs", ["cartpole", "procmaze"],
                          "Environments: cartpole, procmaze (the procedural key-door maze).")
_SEEDS = flags.DEFINE_integer("seeds", 8, "Seeds per side, vmapped.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Rounds of the gradient-steps/s timing.")
_DREAMER_STEPS = flags.DEFINE_integer("dreamer_steps", None,
                                      "Override Dreamer's real-step budget (default: config).")
_PPO_STEPS = flags.DEFINE_integer("ppo_steps", None,
                                  "Override PPO's real-step budget (default: config).")
_JSON = flags.DEFINE_string("json", None, "Where to write the figures as JSON.")

HORIZONS = (1, 5, 15)


def _configs(env_name: str):
  """`(env, ppo config, dreamer config, target metric, target)` from the control configs."""
  config = control_configs.get_config(env_name)
  env = envs.make(config.env.name, **config.env.kwargs)
  ppo_values = dict(config.ppo)
  dreamer_values = config.dreamer.to_dict()
  if _PPO_STEPS.value:
    ppo_values["total_timesteps"] = _PPO_STEPS.value
  if _DREAMER_STEPS.value:
    dreamer_values["total_timesteps"] = _DREAMER_STEPS.value
  ppo_config = ppo.PPOConfig(env_name=config.env.name, **ppo_values)
  dreamer_config = dreamer.DreamerConfig(env_name=config.env.name, **dreamer_values)
  if env_name == "cartpole":
    return env, ppo_config, dreamer_config, "episode_return", 475.0
  return env, ppo_config, dreamer_config, "episode_success", 0.95


def _steps_to_target(metrics, metric: str, target: float,
                     window: int = 100) -> list[int | None]:
  return ppo.steps_to_rolling_target(metrics[metric], metrics["episodes"],
                                     metrics["env_steps"], target, window)


def _train(make_train_fn, config, env, seeds: int):
  """`(final state, metrics, wall seconds with compile)` of `seeds` vmapped seeds."""
  start = time.perf_counter()
  train = jax.jit(jax.vmap(make_train_fn(config, env)))
  state, metrics = jax.block_until_ready(train(jax.random.split(jax.random.key(0), seeds)))
  return state, jax.device_get(metrics), time.perf_counter() - start


def _median_range(values):
  return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _heldout_success(label: str, learner, state, env, episodes: int = 64) -> list[float]:
  """Success of each seed's final policy (sampling) on `episodes` held-out maze layouts."""
  heldout = envs.ProceduralKeyDoorMaze(**{**env.__dict__, "split": "heldout"})
  steps = heldout.max_episode_steps

  def one_episode(params, key):
    env_state, obs = heldout.reset(key)
    if label == "ppo":
      carry = None
    else:
      carry = learner.model.start(params.model_params, obs,
                                  learner.model.latent_noise(key, (), 1)[0])

    def step(c, key):
      env_state, obs, carry, over, success = c
      action_key, noise_key = jax.random.split(key)
      if label == "ppo":
        logits, _ = learner.network.apply(params.params, obs)
      else:
        logits = learner.policy_logits(params.actor_params, carry.features)
      action = jax.random.categorical(action_key, logits)
      env_state, obs, _, done, info = heldout.step(env_state, action, key)
      if label != "ppo":
        carry, _, _ = learner.model.observe_step(
            params.model_params, carry, action, obs,
            learner.model.latent_noise(noise_key, (), 1)[0])
      success = success | (info["success"] & ~over)
      return (env_state, obs, carry, over | done, success), None

    (_, _, _, _, success), _ = jax.lax.scan(
        step, (env_state, obs, carry, False, False), jax.random.split(key, steps))
    return success

  @jax.jit
  def evaluate(states):
    keys = jax.random.split(jax.random.key(7), episodes)
    return jax.vmap(lambda p: jax.vmap(lambda k: one_episode(p, k))(keys).mean())(states)

  return [float(x) for x in jax.device_get(evaluate(state))]


def _open_loop_errors(learner: dreamer.DreamerLearner, state, env, *, episodes: int = 16,
                      length: int = 200) -> dict:
  """Open-loop prediction errors at `HORIZONS` on fresh real trajectories of the actor."""
  params = jax.tree.map(lambda x: x[0], state)  # seed 0
  model = learner.model
  stack = envs.AutoReset(env)

  def rollout(key):
    env_state, obs = stack.reset(key)
    latent = model.start(params.model_params, obs, model.latent_noise(key, (), 1)[0])

    def step(carry, key):
      env_state, obs, latent = carry
      action_key, env_key, noise_key = jax.random.split(key, 3)
      logits = learner.policy_logits(params.actor_params, latent.features)
      action = jax.random.categorical(action_key, logits)
      env_state, next_obs, reward, done, info = stack.step(env_state, action, env_key)
      noise = model.latent_noise(noise_key, (), 2)
      post, _, _ = model.observe_step(params.model_params, latent, action, info["final_obs"],
                                      noise[0])
      fresh = model.start(params.model_params, next_obs, noise[1])
      new_latent = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, post)
      row = (latent, action, reward, info["final_obs"], done & ~info["truncated"], done)
      return (env_state, next_obs, new_latent), row

    _, rows = jax.lax.scan(step, (env_state, obs, latent), jax.random.split(key, length))
    return rows

  @jax.jit
  def errors(key):
    latents, actions, rewards, next_obs, terminal, done = jax.vmap(rollout)(
        jax.random.split(key, episodes))
    horizon = max(HORIZONS)
    starts = length - horizon

    def from_start(t, noise_key):
      # The posterior at o_t, then the real actions a_t .. a_{t+h-1} under the prior.
      latent = jax.tree.map(lambda x: x[:, t], latents)
      acts = jax.lax.dynamic_slice_in_dim(actions, t, horizon, axis=1)
      noise = model.latent_noise(noise_key, (episodes,), horizon)

      def imagine(state, inputs):
        action, noise_t = inputs
        state = model.imagine_step(params.model_params, state, action, noise_t)
        return state, model.predict(params.model_params, state)

      _, (obs_hat, reward_hat, cont_hat) = jax.lax.scan(imagine, latent, (acts.T, noise))
      real = lambda x: jnp.swapaxes(jax.lax.dynamic_slice_in_dim(x, t, horizon, axis=1), 0, 1)  # noqa: E731
      # Valid while the real episode has not ended before the predicted step.
      ended = jnp.cumsum(real(done), axis=0) - real(done) > 0
      valid = ~ended
      return (jnp.abs(obs_hat - real(next_obs)).mean(-1), jnp.abs(reward_hat - real(rewards)),
              (cont_hat > 0.5) == ~real(terminal), valid)

    obs_err, rew_err, cont_ok, valid = jax.vmap(from_start)(
        jnp.arange(0, starts, 5), jax.random.split(jax.random.fold_in(key, 1),
                                                   len(range(0, starts, 5))))
    return obs_err, rew_err, cont_ok, valid

  obs_err, rew_err, cont_ok, valid = jax.device_get(errors(jax.random.key(123)))
  out = {}
  for h in HORIZONS:
    mask = valid[:, h - 1]
    out[str(h)] = {"obs_mae": float(obs_err[:, h - 1][mask].mean()),
                   "reward_mae": float(rew_err[:, h - 1][mask].mean()),
                   "continue_accuracy": float(cont_ok[:, h - 1][mask].mean()),
                   "points": int(mask.sum())}
  return out


def _gradient_steps_per_second(config: dreamer.DreamerConfig, env, seeds: int) -> dict:
  learner = dreamer.make_learner(config, env)
  iterations = 32

  def chunk(state):
    return jax.lax.scan(lambda s, _: learner.update(s), state, None, iterations)

  run = jax.jit(jax.vmap(chunk))
  # Past the random prefill, so every iteration learns.
  state = jax.jit(jax.vmap(learner.init))(jax.random.split(jax.random.key(0), seeds))
  state = state.replace(iteration=jnp.full((seeds,), config.learning_starts
                                           // config.steps_per_iteration + 1, jnp.int32))
  state, _ = jax.block_until_ready(run(state))  # compile, and fill the replay a little
  rates = []
  for _ in range(_REPEATS.value):
    start = time.perf_counter()
    state, _ = jax.block_until_ready(run(state))
    rates.append(seeds * iterations * config.updates_per_collect / (time.perf_counter() - start))
  return _median_range(rates)


def main(argv):
  del argv
  report = {"versions": {"jax": jax.__version__, "python": platform.python_version()},
            "cpu": cpu_model(), "seeds": _SEEDS.value, "envs": {}}
  print(f"CPU: {report['cpu']}; jax {jax.__version__}; {_SEEDS.value} seeds", flush=True)
  for name in _ENVS.value:
    env, ppo_config, dreamer_config, metric, target = _configs(name)
    print(f"\n== {name}: target rolling {metric} {target} (100 episodes)", flush=True)
    result = {"target": {"metric": metric, "value": target}}
    for label, make, config in (("ppo", ppo.make_train, ppo_config),
                                ("dreamer", dreamer.make_train, dreamer_config)):
      state, metrics, wall = _train(make, config, env, _SEEDS.value)
      steps = _steps_to_target(metrics, metric, target)
      budget = config.total_timesteps
      counted = [s if s is not None else budget for s in steps]
      final = ppo.rolling_episode_mean(metrics[metric], metrics["episodes"], 100)[:, -1]
      # The same over the last 10 episodes: 100 episodes at a return of 475 hold 47,500 real
      # steps, so the 100-episode figure cannot fall below that for any learner.
      steps_10 = _steps_to_target(metrics, metric, target, window=10)
      result[label] = {"steps_to_target": steps, "budget": budget,
                       "steps_median": statistics.median(counted),
                       "seeds_reached": sum(s is not None for s in steps),
                       "steps_to_target_10": steps_10,
                       "steps_median_10": statistics.median(
                           s if s is not None else budget for s in steps_10),
                       "seeds_reached_10": sum(s is not None for s in steps_10),
                       "final_rolling": final.tolist(), "wall_seconds_with_compile": wall}
      print(f"  {label:8s} steps to target per seed: {steps}  median "
            f"{statistics.median(counted):,.0f}  reached {result[label]['seeds_reached']}/"
            f"{len(steps)}  final rolling {np.round(final, 3).tolist()}  wall {wall:.0f} s",
            flush=True)
      print(f"  {label:8s} (rolling over 10 episodes) steps to target per seed: {steps_10}  "
            f"median {result[label]['steps_median_10']:,.0f}  reached "
            f"{result[label]['seeds_reached_10']}/{len(steps_10)}", flush=True)
      if name == "procmaze":
        learner = (ppo.make_learner(config, env) if label == "ppo"
                   else dreamer.make_learner(config, env))
        result[label]["heldout_success"] = _heldout_success(label, learner, state, env)
        print(f"  {label:8s} success on held-out layouts per seed: "
              f"{np.round(result[label]['heldout_success'], 3).tolist()}", flush=True)
      if label == "dreamer":
        learner = dreamer.make_learner(config, env)
        result["open_loop"] = _open_loop_errors(learner, state, env)
        for h, errors in result["open_loop"].items():
          print(f"  open loop h={h:>2s}: obs MAE {errors['obs_mae']:.4f}  reward MAE "
                f"{errors['reward_mae']:.4f}  continue accuracy "
                f"{errors['continue_accuracy']:.3f}  ({errors['points']} points)", flush=True)
    # Only a ratio of medians that both sides reached means anything.
    reached = all(result[side]["seeds_reached"] * 2 > _SEEDS.value for side in ("ppo", "dreamer"))
    result["steps_ratio_ppo_over_dreamer"] = (
        result["ppo"]["steps_median"] / result["dreamer"]["steps_median"] if reached else None)
    print("  real steps to target, PPO median / Dreamer median: " + (
        f"{result['steps_ratio_ppo_over_dreamer']:.2f}x" if reached
        else "n/a (a side's median seed did not reach the target)"), flush=True)
    # The acceptance reading: every Dreamer seed against PPO's median seed.
    for suffix in ("", "_10"):
      worst = result["dreamer"][f"steps_to_target{suffix}"]
      ok = (all(s is not None for s in worst)
            and result["ppo"][f"seeds_reached{suffix}"] * 2 > _SEEDS.value)
      result[f"ppo_median_over_dreamer_slowest{suffix}"] = (
          result["ppo"][f"steps_median{suffix}"] / max(worst) if ok else None)
      print(f"  PPO median / Dreamer's slowest seed ({'100' if not suffix else '10'} episodes): "
            + (f"{result[f'ppo_median_over_dreamer_slowest{suffix}']:.2f}x" if ok
               else "n/a (a Dreamer seed or PPO's median seed did not reach the target)"),
            flush=True)
    reached = all(result[side]["seeds_reached_10"] * 2 > _SEEDS.value
                  for side in ("ppo", "dreamer"))
    result["steps_ratio_ppo_over_dreamer_10"] = (
        result["ppo"]["steps_median_10"] / result["dreamer"]["steps_median_10"] if reached
        else None)
    print("  the same over 10 episodes: " + (
        f"{result['steps_ratio_ppo_over_dreamer_10']:.2f}x" if reached
        else "n/a (a side's median seed did not reach the target)"), flush=True)
    for seeds in sorted({1, _SEEDS.value}):
      rate = _gradient_steps_per_second(dreamer_config, env, seeds)
      result[f"gradient_steps_per_s_{seeds}_seeds"] = rate
      print(f"  Dreamer gradient steps/s, {seeds} seed(s): {rate['median']:.1f} "
            f"[{rate['min']:.1f}, {rate['max']:.1f}]", flush=True)
    report["envs"][name] = result
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(report, f, indent=2)


if __name__ == "__main__":
  app.run(main)
