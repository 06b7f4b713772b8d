r"""PPO on CartPole-v1, side by side: rlagents vs PureJaxRL (and Stable-Baselines3 when asked).

    python benchmarks/ppo_cartpole.py --purejaxrl_dir=/tmp/purejaxrl \
        --peer_python=/tmp/peer_venv/bin/python --sb3 --json=/tmp/ppo_cartpole.json

Same hyper-parameters on every side: 4 envs x 128 steps, 500k steps (976 updates), 4 epochs x 4
minibatches, 64x64 tanh actor and critic, Adam 2.5e-4 annealed linearly, clip 0.2 (policy and
value), entropy 0.01, value 0.5, grad norm 0.5, gamma 0.99, lambda 0.95, advantages normalised
per minibatch, a time-limit cut treated as terminal as PureJaxRL does (ours bootstraps it by
default: `--bootstrap_truncation`; SB3 always does). Measured for one seed (`jit(train)`) and
`--num_seeds` seeds (`jit(vmap(train))`), each side in its own process, one after the other,
with the threads this process may use:

- env steps/s without compile: env steps of all seeds / time of a whole compiled `train` call
  (rollouts and updates), median [min, max] over `--repeats` calls with different seeds; also in
  process CPU time, which load from other programs inflates less;
- wall to a rolling mean return of `--threshold` with compile: compile time + the call's time x
  the fraction of updates done when the mean return of the last 100 episodes first reaches the
  threshold (a compiled call cannot be timed inside; the same estimate on both JAX sides); for
  several seeds, when the slowest seed reaches it; SB3 is timed directly with a callback;
- final return: that rolling mean after the last update (median and min over seeds and calls).

PureJaxRL is not a package: `--purejaxrl_dir` is a checkout of github.com/luchris429/purejaxrl;
its `ppo.py` imports gymnax (0.0.9, for its `step` API), brax and navix, so it runs under
`--peer_python`, an interpreter of a separate environment that has them (never this one). The
peer is skipped with a notice when the directory is absent. `--sb3` runs Stable-Baselines3 (PPO,
its own gymnasium CartPole-v1, DummyVecEnv) under the same interpreter, once per `--sb3_repeats`;
skipped with a notice when it does not import there. '2 devices pmapped' runs one seed per
device with `jax.pmap(train)` on two host CPU devices (`--devices`, set through XLA_FLAGS for this
process and the peer's, so every mode of both sides runs under the same flag).

PureJaxRL's `wrappers.py` imports brax and navix at the top, for environments CartPole does not
use; where they are not installed the driver puts empty stand-in modules in their place (listed
as `stand_ins` in the JSON).

Our side runs with `--xla_cpu_enable_concurrency_optimized_scheduler=false`, which `import
rlagents` adds to XLA_FLAGS (jaxlib 0.10.2 deadlocks on repeated calls of the vmapped program
without it; ~8% slower on one seed); the peers run under XLA's defaults. Both are in the JSON.

Prints the figures and writes them to `--json`; it never fails on a time.
"""

import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time

from absl import app
from absl import flags
import numpy as np
from rlagents import _xla_cpu
from rlagents.metrics import cpu_model

_PUREJAXRL_DIR = flags.DEFINE_string("purejaxrl_dir", "/tmp/purejaxrl",
                                     "Checkout of luchris429/purejaxrl; skipped if absent.")
_PEER_PYTHON = flags.DEFINE_string("peer_python", "/tmp/peer_venv/bin/python",
                                   "Interpreter with the peers' dependencies.")
_SB3 = flags.DEFINE_bool("sb3", False, "Also run Stable-Baselines3 (slow: ~2 min per run).")
_SB3_REPEATS = flags.DEFINE_integer("sb3_repeats", 1, "Stable-Baselines3 runs.")
_PEER_TIMEOUT = flags.DEFINE_integer(
    "peer_timeout", 1800, "Seconds a peer process may run before it is stopped and skipped.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls (seeds) per side and mode.")
_NUM_SEEDS = flags.DEFINE_integer("num_seeds", 8, "Seeds in the vmapped mode (0 skips it).")
_TOTAL_TIMESTEPS = flags.DEFINE_integer("total_timesteps", 500_000, "Env steps per seed.")
_THRESHOLD = flags.DEFINE_float("threshold", 475.0, "Rolling mean return to reach.")
_JSON = flags.DEFINE_string("json", None, "Where to write the figures as JSON.")
_SKIP_OURS = flags.DEFINE_bool("skip_ours", False, "Measure only the peers.")
_DEVICES = flags.DEFINE_integer("devices", 2, "Host CPU devices (for the pmap mode; 1 skips it).")
_BOOTSTRAP_TRUNCATION = flags.DEFINE_bool(
    "bootstrap_truncation", False,
    "Our default, off here: PureJaxRL treats a time-limit cut as terminal, so off is the same "
    "work. On, our CartPole figures include the truncated-episode bootstrap (~0-7% slower).")

WINDOW = 100  # episodes in the rolling mean, as Stable-Baselines3's `ep_rew_mean`
NUM_ENVS, NUM_STEPS, EPOCHS, MINIBATCHES = 4, 128, 4, 4

# Runs PureJaxRL's make_train in the peer's interpreter; prints one JSON line. Its per-step
# episode records are reduced to per-update (mean return, episodes), as rlagents reports them.
_PUREJAXRL_DRIVER = textwrap.dedent("""
    import importlib.metadata, importlib.util, json, sys, time, types
    sys.path.insert(0, sys.argv[1])
    # PureJaxRL's wrappers.py imports brax and navix at the top for other environments; when
    # they are not installed, empty stand-ins let CartPole (which uses neither) import.
    missing = [root for root in ("brax", "navix") if importlib.util.find_spec(root) is None]
    for name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training",
                 "navix"):
      if name.split(".")[0] in missing:
        module = sys.modules.setdefault(name, types.ModuleType(name))
        module._stand_in = True
        module.EpisodeWrapper = module.AutoResetWrapper = object
        if "." in name:
          parent, child = name.rsplit(".", 1)
          setattr(sys.modules[parent], child, module)
    stand_ins = sorted(n for n, m in sys.modules.items() if getattr(m, "_stand_in", False))
    import jax, jax.numpy as jnp, numpy as np
    import ppo
    total, num_seeds, repeats = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": total,
              "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
              "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
              "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True,
              "DEBUG": False}

    def per_update(metrics):
      ended = np.asarray(metrics["returned_episode"])
      returns = np.asarray(metrics["returned_episode_returns"])
      episodes = ended.sum(axis=(-2, -1))
      sums = (returns * ended).sum(axis=(-2, -1))
      return np.where(episodes > 0, sums / np.maximum(episodes, 1), np.nan), episodes

    out = {"versions": {m: importlib.metadata.version(m)
                        for m in ("jax", "jaxlib", "flax", "optax", "distrax", "gymnax")},
           "stand_ins": stand_ins}
    modes = [("1 seed", 1, "jit")]
    if num_seeds:
      modes.append((f"{num_seeds} seeds vmapped", num_seeds, "vmap"))
    if jax.local_device_count() >= 2:
      modes.append(("2 devices pmapped", 2, "pmap"))
    for name, seeds, how in modes:
      train = ppo.make_train(dict(config))
      fn = {"jit": jax.jit, "vmap": lambda f: jax.jit(jax.vmap(f)), "pmap": jax.pmap}[how](train)
      keys = [jax.random.PRNGKey(r) if seeds == 1 else
              jax.random.split(jax.random.PRNGKey(r), seeds) for r in range(repeats)]
      start = time.perf_counter()
      compiled = fn.lower(keys[0]).compile()
      compile_s = time.perf_counter() - start
      runs = []
      for key in keys:
        start, cpu = time.perf_counter(), time.process_time()
        result = jax.block_until_ready(compiled(key))
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        returns, episodes = per_update(result["metrics"])
        runs.append({"seconds": seconds, "cpu_seconds": cpu_seconds,
                     "episode_return": np.atleast_2d(returns).tolist(),
                     "episodes": np.atleast_2d(episodes).tolist()})
      steps = (total // (4 * 128)) * 4 * 128
      out[name] = {"seeds": seeds, "compile_s": compile_s, "steps_per_seed": steps, "runs": runs}
    print(json.dumps(out))
""")

# Stable-Baselines3 with the same hyper-parameters; prints one JSON line.
_SB3_DRIVER = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import torch
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    total, threshold, seed = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(len(os.sched_getaffinity(0)))

    class Watch(BaseCallback):
      reached = None
      def _on_step(self):
        buffer = self.model.ep_info_buffer
        if (self.reached is None and len(buffer) == buffer.maxlen
            and np.mean([e["r"] for e in buffer]) >= threshold):
          self.reached = time.perf_counter()
        return True

    start = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=4, seed=seed)
    model = sb3.PPO(
        "MlpPolicy", env, learning_rate=lambda remaining: 2.5e-4 * remaining, n_steps=128,
        batch_size=128, n_epochs=4, gamma=0.99, gae_lambda=0.95, clip_range=0.2,
        clip_range_vf=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]},
                       "activation_fn": torch.nn.Tanh},
        device="cpu", seed=seed, verbose=0)
    watch = Watch()
    learn_start = time.perf_counter()
    model.learn(total_timesteps=total, callback=watch)
    end = time.perf_counter()
    final = float(np.mean([e["r"] for e in model.ep_info_buffer]))
    print(json.dumps({"versions": {"stable_baselines3": sb3.__version__,
                                   "torch": torch.__version__},
                      "steps": int(model.num_timesteps), "learn_s": end - learn_start,
                      "wall_s": end - start,
                      "wall_to_threshold_s": None if watch.reached is None
                      else watch.reached - start,
                      "final_return": final}))
""")


def _median_range(values):
  values = [v for v in values if v is not None and np.isfinite(v)]
  if not values:
    return None
  return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _rolling(episode_return, episodes):
  from rlagents.learners import ppo  # pylint: disable=g-import-not-at-top
  return ppo.rolling_episode_mean(np.asarray(episode_return, np.float64),
                                    np.asarray(episodes, np.float64), WINDOW)


def _summarize(mode: dict, threshold: float) -> dict:
  """Figures of one side and mode from its compile time and runs (per-update episode data)."""
  seeds, steps = mode["seeds"], mode["steps_per_seed"]
  to_threshold, finals = [], []
  for run in mode["runs"]:
    rolling = _rolling(run["episode_return"], run["episodes"])  # [seeds, updates]
    reached = rolling >= threshold
    finals.extend(rolling[:, -1].tolist())
    if reached.any(axis=1).all():
      slowest = max(int(np.argmax(r)) for r in reached) + 1
      to_threshold.append(mode["compile_s"] + run["seconds"] * slowest / rolling.shape[1])
    else:
      to_threshold.append(None)
  return {
      "seeds": seeds,
      "compile_s": mode["compile_s"],
      "steps_per_s": _median_range([seeds * steps / r["seconds"] for r in mode["runs"]]),
      "steps_per_cpu_s": _median_range([seeds * steps / r["cpu_seconds"]
                                        for r in mode["runs"]]),
      "run_s": _median_range([r["seconds"] for r in mode["runs"]]),
      "wall_to_threshold_s": _median_range(to_threshold),
      "runs_reaching_threshold": sum(t is not None for t in to_threshold),
      "runs": len(mode["runs"]),
      "final_return": {"median": float(np.median(finals)), "min": float(np.min(finals))},
  }


def _run_ours(total: int, num_seeds: int, repeats: int, bootstrap_truncation: bool) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  from rlagents.learners import ppo  # pylint: disable=g-import-not-at-top
  config = ppo.PPOConfig(total_timesteps=total, num_envs=NUM_ENVS, num_steps=NUM_STEPS,
                         update_epochs=EPOCHS, num_minibatches=MINIBATCHES,
                         bootstrap_truncation=bootstrap_truncation)
  out = {}
  modes = [("1 seed", 1, "jit")]
  if num_seeds:
    modes.append((f"{num_seeds} seeds vmapped", num_seeds, "vmap"))
  if jax.local_device_count() >= 2:
    # One independent seed per device: the same program on each (no cross-device reduction).
    modes.append(("2 devices pmapped", 2, "pmap"))
  for name, seeds, how in modes:
    train = ppo.make_train(config)
    fn = {"jit": jax.jit, "vmap": lambda f: jax.jit(jax.vmap(f)), "pmap": jax.pmap}[how](train)
    keys = [jax.random.key(r) if seeds == 1 else jax.random.split(jax.random.key(r), seeds)
            for r in range(repeats)]
    start = time.perf_counter()
    compiled = fn.lower(keys[0]).compile()
    compile_s = time.perf_counter() - start
    runs = []
    for key in keys:
      start, cpu = time.perf_counter(), time.process_time()
      _, metrics = jax.block_until_ready(compiled(key))
      seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
      runs.append({"seconds": seconds, "cpu_seconds": cpu_seconds,
                   "episode_return": np.atleast_2d(np.asarray(metrics["episode_return"])),
                   "episodes": np.atleast_2d(np.asarray(metrics["episodes"]))})
    out[name] = {"seeds": seeds, "compile_s": compile_s,
                 "steps_per_seed": config.num_updates * config.batch_size, "runs": runs}
  return out


def _peer_env() -> dict:
  """This process's environment without the XLA flag `import rlagents` adds for our side.

  The peers run under XLA's defaults, as their users would run them (`rlagents/_xla_cpu.py` says
  why ours turns the concurrency-optimized CPU scheduler off).
  """
  env = dict(os.environ)
  flags_ = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(_xla_cpu.FLAG)]
  env["XLA_FLAGS"] = " ".join(flags_)
  return env


def _run_json_driver(args: list[str], label: str) -> dict | None:
  """Runs a driver under the peer interpreter; its last stdout line is JSON. None on failure."""
  try:
    proc = subprocess.run(args, capture_output=True, text=True, check=False,
                          timeout=_PEER_TIMEOUT.value, env=_peer_env())
  except subprocess.TimeoutExpired:
    print(f"[{label}] did not finish within --peer_timeout={_PEER_TIMEOUT.value} s; skipped")
    return None
  lines = proc.stdout.strip().splitlines()
  if proc.returncode != 0 or not lines:
    tail = "\n    ".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
    print(f"[{label}] failed (exit {proc.returncode}); skipped:\n    {tail}")
    return None
  return json.loads(lines[-1])


def _versions() -> dict:
  import flax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jaxlib  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  return {"python": platform.python_version(), "jax": jax.__version__,
          "jaxlib": jaxlib.__version__, "flax": flax.__version__, "optax": optax.__version__}




def _fmt(figure, unit="", scale=1.0, digits=0):
  if figure is None:
    return "-"
  m, lo, hi = (figure[k] * scale for k in ("median", "min", "max"))
  return f"{m:,.{digits}f}{unit} [{lo:,.{digits}f}, {hi:,.{digits}f}]"


def main(argv):
  del argv
  if _DEVICES.value > 1 and "xla_force_host_platform_device_count" not in os.environ.get(
      "XLA_FLAGS", ""):
    # Read when the backend starts (the first jax call below); inherited by the peer.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_"
                               f"device_count={_DEVICES.value}").strip()
  threshold, total = _THRESHOLD.value, _TOTAL_TIMESTEPS.value
  report = {
      "benchmark": "ppo_cartpole",
      "settings": {"num_envs": NUM_ENVS, "num_steps": NUM_STEPS, "update_epochs": EPOCHS,
                   "num_minibatches": MINIBATCHES, "hidden": [64, 64], "activation": "tanh",
                   "total_timesteps": total, "threshold": threshold, "window": WINDOW,
                   "repeats": _REPEATS.value, "num_seeds": _NUM_SEEDS.value,
                   "ours_bootstrap_truncation": _BOOTSTRAP_TRUNCATION.value},
      "xla_flags": {"ours": os.environ.get("XLA_FLAGS", ""),
                    "peers": _peer_env()["XLA_FLAGS"]},
      "machine": {"cpu": cpu_model(), "threads": len(os.sched_getaffinity(0)),
                  "load_average_at_start": os.getloadavg()},
      "versions": {"ours": _versions()},
      "sides": {},
      "skipped": {},
  }
  print(f"CPU: {report['machine']['cpu']}, {report['machine']['threads']} threads, load "
        f"{report['machine']['load_average_at_start'][0]:.2f}; ours: "
        + ", ".join(f"{k} {v}" for k, v in report["versions"]["ours"].items()), flush=True)

  raw = {}
  if not _SKIP_OURS.value:
    raw["rlagents"] = _run_ours(total, _NUM_SEEDS.value, _REPEATS.value,
                                _BOOTSTRAP_TRUNCATION.value)
    print("rlagents: done", flush=True)

  peer_dir = os.path.join(_PUREJAXRL_DIR.value, "purejaxrl")
  if not os.path.isfile(os.path.join(peer_dir, "ppo.py")):
    note = f"no PureJaxRL checkout at {_PUREJAXRL_DIR.value} (pass --purejaxrl_dir)"
    report["skipped"]["purejaxrl"] = note
    print(f"[PureJaxRL] skipped: {note}")
  elif not os.path.isfile(_PEER_PYTHON.value):
    note = f"no peer interpreter at {_PEER_PYTHON.value} (pass --peer_python)"
    report["skipped"]["purejaxrl"] = note
    print(f"[PureJaxRL] skipped: {note}")
  else:
    peer = _run_json_driver(
        [_PEER_PYTHON.value, "-c", _PUREJAXRL_DRIVER, peer_dir, str(total),
         str(_NUM_SEEDS.value), str(_REPEATS.value)], "PureJaxRL")
    if peer is None:
      report["skipped"]["purejaxrl"] = "the peer failed to run (see the output)"
    else:
      report["versions"]["purejaxrl"] = peer.pop("versions")
      report["purejaxrl_stand_ins"] = peer.pop("stand_ins")
      raw["purejaxrl"] = peer
      print("PureJaxRL: done", flush=True)

  for side, modes in raw.items():
    report["sides"][side] = {name: _summarize(mode, threshold) for name, mode in modes.items()}

  if _SB3.value:
    sb3_runs = []
    for seed in range(_SB3_REPEATS.value):
      result = _run_json_driver([_PEER_PYTHON.value, "-c", _SB3_DRIVER, str(total),
                                 str(threshold), str(seed)], "Stable-Baselines3")
      if result is None:
        break
      report["versions"]["stable_baselines3"] = result.pop("versions")
      sb3_runs.append(result)
    if sb3_runs:
      to_threshold = [r["wall_to_threshold_s"] for r in sb3_runs]
      report["sides"]["stable_baselines3"] = {"1 seed": {
          "seeds": 1,
          "steps_per_s": _median_range([r["steps"] / r["learn_s"] for r in sb3_runs]),
          "wall_to_threshold_s": _median_range(to_threshold),
          "runs_reaching_threshold": sum(t is not None for t in to_threshold),
          "runs": len(sb3_runs),
          "run_s": _median_range([r["wall_s"] for r in sb3_runs]),
          "final_return": {"median": statistics.median(r["final_return"] for r in sb3_runs),
                           "min": min(r["final_return"] for r in sb3_runs)}}}
    else:
      report["skipped"]["stable_baselines3"] = "did not run under --peer_python"
  else:
    report["skipped"]["stable_baselines3"] = "not requested (--sb3)"

  print(f"\nPPO CartPole-v1, {total:,} steps per seed; median [min, max]; wall to rolling mean "
        f"{threshold:g} includes compile")
  print(f"{'side':<18} {'mode':<18} {'env steps/s':>30} {'per CPU-s':>12} {'compile s':>9} "
        f"{'wall to thr. s':>22} {'reached':>8} {'final (med/min)':>16}")
  for side, modes in report["sides"].items():
    for name, fig in modes.items():
      per_cpu = f"{fig['steps_per_cpu_s']['median']:,.0f}" if fig.get("steps_per_cpu_s") else "-"
      compile_s = f"{fig['compile_s']:.1f}" if "compile_s" in fig else "-"
      reached = f"{fig['runs_reaching_threshold']}/{fig['runs']}"
      final = f"{fig['final_return']['median']:.1f}/{fig['final_return']['min']:.1f}"
      print(f"{side:<18} {name:<18} {_fmt(fig['steps_per_s']):>30} {per_cpu:>12} "
            f"{compile_s:>9} {_fmt(fig['wall_to_threshold_s'], digits=1):>22} {reached:>8} "
            f"{final:>16}")

  ratios = {}
  sides = report["sides"]
  for peer in ("purejaxrl", "stable_baselines3"):
    if "rlagents" not in sides or peer not in sides:
      continue
    for name in sides[peer]:
      if name not in sides["rlagents"]:
        continue
      ours, theirs = sides["rlagents"][name], sides[peer][name]
      entry = {"throughput": ours["steps_per_s"]["median"] / theirs["steps_per_s"]["median"]}
      if ours.get("steps_per_cpu_s") and theirs.get("steps_per_cpu_s"):
        entry["throughput_cpu_time"] = (ours["steps_per_cpu_s"]["median"]
                                        / theirs["steps_per_cpu_s"]["median"])
      if ours["wall_to_threshold_s"] and theirs["wall_to_threshold_s"]:
        entry["wall_to_threshold"] = (theirs["wall_to_threshold_s"]["median"]
                                      / ours["wall_to_threshold_s"]["median"])
      ratios[f"{peer} ({name})"] = entry
  report["ratios"] = ratios
  if ratios:
    print("\nratios (throughput: ours / peer, above 1 = faster; wall to threshold: peer / ours)")
    for label, entry in ratios.items():
      print(f"  vs {label:<32} " + "  ".join(f"{k} {v:.2f}x" for k, v in entry.items()))
  for side, note in report["skipped"].items():
    print(f"skipped {side}: {note}")
  print("versions: " + json.dumps(report["versions"]))
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(report, f, indent=2)
    print(f"figures: {_JSON.value}")


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  app.run(main)
