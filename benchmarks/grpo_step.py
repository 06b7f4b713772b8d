r"""GRPO throughput: a full step against TRL's GRPOTrainer, and the update on 1, 2 and 8 devices.

Run: `python benchmarks/grpo_step.py --peer_python=/tmp/peer_venv/bin/python --json=/tmp/grpo.json`

**Full step, side by side with TRL** (`--trl`, on by default): generation + reward + update, in
completion tokens per second of wall time. One tiny random Qwen2 (BENCH.md's shape: hidden 256, 4
layers, 4 heads, 2 KV heads, intermediate 768, character tokenizer) is built in transformers and
saved once; rlagents loads it with `rlagents.hf.load_pretrained`, TRL with `from_pretrained`. Both
sides take the same 8 prompts of 32 tokens, 8 completions each (64 rows), exactly 32 sampled
completion tokens at temperature 1 (no stop token here; `min_new_tokens` there), the same reward
function on the decoded text (fraction of digits), group-normalised advantages, KL beta 0.04 to the
initial model, clipped objective, one optimizer step per batch at learning rate 1e-5. Ours is
`sampling.generate_segment` -> reward in Python -> `grpo.grpo_update` (jitted); TRL's is
`GRPOTrainer.train` with `use_cpu=True` and PyTorch on `--threads` threads, in the peer's
interpreter (`--peer_python`, an environment with trl; skipped with a notice when it is absent or
trl does not import there). Each side gets `--warmup` untimed steps (ours include the compile),
then `--steps` timed steps; median, min and max; ratio = ours / TRL. TRL's step time is taken
between its `on_step_begin` and `on_step_end` callbacks, so its data loading and logging between
steps are not counted.

**Update-step scaling**:
Each device count runs in its own subprocess with
`XLA_FLAGS=--xla_force_host_platform_device_count=N` (XLA reads it when the backend starts). The
step is `rlagents.learners.grpo.grpo_update` wrapped by `rlagents.parallel.shard_map_update` on
BENCH.md's tiny Qwen2 shape (hidden 256, 4 layers, 4 heads, 2 KV heads, intermediate 768, vocab
512, random init), 8 prompts x group 8 = 64 rows of a 32-token prompt and 32 completion tokens,
KL beta 0.04, AdamW. Reported: compile time, then completion tokens/s of the update (median, min,
max of --repeats timed steps). Forced host devices share the same cores, so this measures the
wrappers' overhead, not a speed-up.
"""

import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from absl import app
from absl import flags

from rlagents.metrics import cpu_model

_DEVICES = flags.DEFINE_list("devices", ["1", "2", "8"], "Forced CPU device counts.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed steps per device count.")
_CHILD = flags.DEFINE_integer("child", 0, "Internal: run one device count and print JSON.")
_JSON = flags.DEFINE_string("json", None, "Also write the figures to this JSON file.")
_TRL = flags.DEFINE_bool("trl", True, "Measure the full step against TRL's GRPOTrainer.")
_PEER_PYTHON = flags.DEFINE_string("peer_python", "/tmp/peer_venv/bin/python",
                                   "Interpreter of an environment with trl (and torch).")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed full steps per side (ours: with compile).")
_STEPS = flags.DEFINE_integer("steps", 5, "Timed full steps per side.")
_THREADS = flags.DEFINE_integer("threads", 2, "PyTorch intra-op threads on TRL's side.")
_CHILD_FULL = flags.DEFINE_string("child_full", None, "Internal: our full step on this model dir.")

PROMPTS, GROUP, PROMPT_LEN, NEW_TOKENS = 8, 8, 32, 32
LEARNING_RATE, KL_BETA = 1e-5, 0.04
SHAPE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=768)
# Prompts of exactly PROMPT_LEN characters, i.e. tokens under the character tokenizer (lower case,
# digits and punctuation; no spaces).
PROMPTS_TEXT = [f"q{i}:whatis{i * 7}+{i * 13 + 5}?".ljust(PROMPT_LEN, ".")
                for i in range(PROMPTS)]



def digit_fraction(text: str) -> float:
  """The reward on both sides (its source is handed to TRL's driver): the share of digits."""
  return sum(c.isdigit() for c in text) / max(len(text), 1)

# Runs TRL's GRPOTrainer in the peer's interpreter; prints one JSON line of step times.
_TRL_DRIVER = textwrap.dedent("""
    import json, sys, tempfile, time
    import torch, transformers, trl, datasets
    model_dir, prompts, group, new_tokens, lr, beta, warmup, steps, threads, reward_src = (
        sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:5]), *map(float, sys.argv[5:7]),
        *map(int, sys.argv[7:10]), sys.argv[10])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    namespace = {}
    exec(reward_src, namespace)
    def reward(completions, **kwargs):
      return [namespace["digit_fraction"](c) for c in completions]
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    times = []
    class Timer(transformers.TrainerCallback):
      def on_step_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()
      def on_step_end(self, args, state, control, **kwargs):
        times.append(time.perf_counter() - self.start)
    with tempfile.TemporaryDirectory() as out:
      args = trl.GRPOConfig(
          output_dir=out, use_cpu=True, per_device_train_batch_size=len(prompts) * group,
          num_generations=group, max_completion_length=new_tokens, temperature=1.0,
          top_k=0, top_p=1.0, learning_rate=lr, beta=beta, num_iterations=1,
          gradient_accumulation_steps=1, max_steps=warmup + steps, logging_steps=1,
          report_to=[], save_strategy="no", lr_scheduler_type="constant", warmup_steps=0,
          shuffle_dataset=False, seed=0, bf16=False,
          generation_kwargs={"min_new_tokens": new_tokens})
      data = datasets.Dataset.from_dict({"prompt": prompts * (warmup + steps)})
      trainer = trl.GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                                processing_class=tokenizer, callbacks=[Timer()])
      trainer.train()
    print(json.dumps({"step_s": times[warmup:], "warmup_s": times[:warmup],
                      "versions": {"trl": trl.__version__, "torch": torch.__version__,
                                   "transformers": transformers.__version__}}))
""")


def _child(repeats: int) -> dict:
  import functools  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from rlagents import learners, networks, parallel  # pylint: disable=g-import-not-at-top
  from rlagents.learners import grpo  # pylint: disable=g-import-not-at-top

  length = PROMPT_LEN + NEW_TOKENS
  model = networks.Transformer(networks.TransformerConfig(
      vocab_size=512, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=768,
      max_len=length))
  params = model.init(jax.random.key(0), jnp.zeros((1, length), jnp.int32),
                      jnp.arange(length)[None])
  config = learners.GRPOConfig(prompts_per_step=PROMPTS, group_size=GROUP, kl_beta=0.04,
                               microbatch_size=0,
                               optimizer=learners.OptimizerConfig(learning_rate=1e-5))
  rng = np.random.default_rng(0)
  rows = PROMPTS * GROUP
  mask = np.zeros((rows, length), np.float32)
  mask[:, PROMPT_LEN:] = 1
  batch = {"tokens": rng.integers(1, 512, (rows, length)).astype(np.int32), "loss_mask": mask,
           "old_logprobs": (-6.0 * mask).astype(np.float32),
           "rewards": rng.random(rows).astype(np.float32)}
  batch["advantages"] = np.asarray(grpo.grpo_advantages(batch, config))
  mesh = parallel.make_mesh(parallel.MeshConfig(data=-1))
  step = parallel.shard_map_update(functools.partial(grpo.grpo_update, config=config), mesh,
                                   num_state_args=2, donate=True)
  state = parallel.shard_state(learners.create_train_state(model, params, config.optimizer), mesh)
  ref = parallel.shard_state(params, mesh)
  placed = parallel.shard_batch(batch, mesh)
  start = time.perf_counter()
  state, metrics = step(state, ref, placed)
  jax.block_until_ready(metrics)
  compile_s = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    state, metrics = step(state, ref, placed)
    jax.block_until_ready(metrics)
    times.append(time.perf_counter() - start)
  tokens = rows * NEW_TOKENS
  return {"devices": jax.device_count(), "compile_and_first_step_s": compile_s,
          "step_s_median": statistics.median(times),
          "tokens_per_s_median": tokens / statistics.median(times),
          "tokens_per_s_min": tokens / max(times), "tokens_per_s_max": tokens / min(times),
          "jax": jax.__version__}


def _save_model(path: str) -> None:
  """The shared random Qwen2 and the character tokenizer, as a transformers directory."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from rlagents import hf  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  tokenizer = hf.build_char_tokenizer()
  config = transformers.Qwen2Config(
      **SHAPE, vocab_size=len(tokenizer), max_position_embeddings=PROMPT_LEN + NEW_TOKENS,
      tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id,
      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
  transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
  tokenizer.save_pretrained(path)


def _child_full(path: str, warmup: int, steps: int) -> dict:
  """Our full GRPO step (generation + reward + update) on the saved model; step times."""
  import functools  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from rlagents import hf, learners, networks, sampling  # pylint: disable=g-import-not-at-top
  from rlagents.learners import grpo  # pylint: disable=g-import-not-at-top

  tokenizer = transformers.AutoTokenizer.from_pretrained(path)
  loaded = hf.load_pretrained(path)
  model = networks.Transformer(loaded.config)
  config = learners.GRPOConfig(prompts_per_step=PROMPTS, group_size=GROUP, kl_beta=KL_BETA,
                               microbatch_size=0, optimizer=learners.OptimizerConfig(
                                   learning_rate=LEARNING_RATE, warmup_steps=0))
  prompt_ids = np.asarray([tokenizer(p, add_special_tokens=False)["input_ids"]
                           for p in PROMPTS_TEXT], np.int32)
  assert prompt_ids.shape == (PROMPTS, PROMPT_LEN), prompt_ids.shape
  rows, length = PROMPTS * GROUP, PROMPT_LEN + NEW_TOKENS
  buffer = np.zeros((rows, length), np.int32)
  buffer[:, :PROMPT_LEN] = np.repeat(prompt_ids, GROUP, axis=0)
  buffer, lengths = jnp.asarray(buffer), jnp.full((rows,), PROMPT_LEN, jnp.int32)
  active = jnp.ones((rows,), bool)
  ref = loaded.params
  state = learners.create_train_state(model, jax.tree.map(jnp.copy, ref), config.optimizer)
  update = jax.jit(functools.partial(grpo.grpo_update, config=config), donate_argnums=0)

  def step(state, key):
    out = sampling.generate_segment(state.params, buffer, lengths, active, key, model=model,
                                    max_new_tokens=NEW_TOKENS, stop_tokens=(), temperature=1.0)
    completions = np.asarray(out.tokens)[:, PROMPT_LEN:]
    texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
    batch = {"tokens": out.tokens, "loss_mask": out.generated_mask.astype(jnp.float32),
             "old_logprobs": out.logprobs,
             "rewards": jnp.asarray([digit_fraction(t) for t in texts], jnp.float32)}
    batch["advantages"] = grpo.grpo_advantages(batch, config)
    state, metrics = update(state, ref, batch)
    jax.block_until_ready((state, metrics))
    assert int(out.generated_mask.sum()) == rows * NEW_TOKENS
    return state, float(np.mean(batch["rewards"]))

  times, rewards = [], []
  for i in range(warmup + steps):
    start = time.perf_counter()
    state, reward = step(state, jax.random.key(i))
    times.append(time.perf_counter() - start)
    rewards.append(reward)
  return {"step_s": times[warmup:], "warmup_s": times[:warmup], "mean_reward": rewards,
          "versions": {"jax": jax.__version__}}


def _rates(step_s: list[float]) -> dict:
  tokens = PROMPTS * GROUP * NEW_TOKENS
  return {"step_s_median": statistics.median(step_s),
          "tokens_per_s_median": tokens / statistics.median(step_s),
          "tokens_per_s_min": tokens / max(step_s), "tokens_per_s_max": tokens / min(step_s)}


def _full_step(root: str) -> dict:
  """Both sides of the full-step comparison, one after the other; a report dict."""
  report = {"settings": {"prompts": PROMPTS, "group": GROUP, "prompt_len": PROMPT_LEN,
                         "new_tokens": NEW_TOKENS, "kl_beta": KL_BETA,
                         "learning_rate": LEARNING_RATE, "warmup": _WARMUP.value,
                         "steps": _STEPS.value, "torch_threads": _THREADS.value, **SHAPE}}
  env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
  with tempfile.TemporaryDirectory() as path:
    _save_model(path)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), f"--child_full={path}",
                          f"--warmup={_WARMUP.value}", f"--steps={_STEPS.value}"], env=env,
                         capture_output=True, text=True, check=True)
    ours = json.loads([l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1][7:])
    report["rlagents"] = {**_rates(ours["step_s"]), **ours}
    print(f"full step rlagents: {report['rlagents']['tokens_per_s_median']:,.0f} completion tok/s "
          f"(step {report['rlagents']['step_s_median']:.3f} s)", flush=True)
    if not os.path.isfile(_PEER_PYTHON.value):
      report["skipped"] = f"no peer interpreter at {_PEER_PYTHON.value} (pass --peer_python)"
    else:
      proc = subprocess.run(
          [_PEER_PYTHON.value, "-c", _TRL_DRIVER, path, json.dumps(PROMPTS_TEXT), str(GROUP),
           str(NEW_TOKENS), str(LEARNING_RATE), str(KL_BETA), str(_WARMUP.value),
           str(_STEPS.value), str(_THREADS.value), inspect.getsource(digit_fraction)],
          capture_output=True, text=True, check=False)
      lines = proc.stdout.strip().splitlines()
      if proc.returncode != 0 or not lines:
        tail = "\n    ".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        report["skipped"] = f"TRL failed under {_PEER_PYTHON.value} (exit {proc.returncode})"
        print(f"[TRL] skipped: {report['skipped']}:\n    {tail}")
      else:
        theirs = json.loads(lines[-1])
        report["trl"] = {**_rates(theirs["step_s"]), **theirs}
        report["ratio"] = (report["rlagents"]["tokens_per_s_median"]
                           / report["trl"]["tokens_per_s_median"])
  if "skipped" in report:
    print(f"[TRL] skipped: {report['skipped']}")
  return report


def main(argv):
  del argv
  if _CHILD.value:
    print("RESULT " + json.dumps(_child(_REPEATS.value)))
    return
  if _CHILD_FULL.value:
    print("RESULT " + json.dumps(_child_full(_CHILD_FULL.value, _WARMUP.value, _STEPS.value)))
    return
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  full = _full_step(root) if _TRL.value else None
  if full and "trl" in full:
    o, t = full["rlagents"], full["trl"]
    print(f"\nFull GRPO step (generation + reward + update), {PROMPTS}x{GROUP} rows, "
          f"{NEW_TOKENS} completion tokens; completion tok/s median [min, max]")
    for name, side in (("rlagents", o), (f"TRL {t['versions']['trl']}", t)):
      print(f"  {name:<12} {side['tokens_per_s_median']:>8,.0f} [{side['tokens_per_s_min']:,.0f}, "
            f"{side['tokens_per_s_max']:,.0f}]  step {side['step_s_median']:.3f} s")
    print(f"  ratio (ours / TRL): {full['ratio']:.2f}x\n", flush=True)
  results = []
  for count in _DEVICES.value:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}",
           "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), f"--child={count}",
                          f"--repeats={_REPEATS.value}"], env=env, capture_output=True,
                         text=True, check=True)
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1]
    results.append(json.loads(line[len("RESULT "):]))
  print(f"CPU: {cpu_model()}; jax {results[0]['jax']}; python {sys.version.split()[0]}")
  print(f"GRPO update step, tiny Qwen2, {PROMPTS}x{GROUP} rows, {NEW_TOKENS} completion tokens")
  print("devices  compile+first (s)  step median (s)  completion tok/s median [min, max]")
  for r in results:
    print(f"{r['devices']:>7}  {r['compile_and_first_step_s']:>17.2f}  {r['step_s_median']:>15.3f}"
          f"  {r['tokens_per_s_median']:>10.0f} [{r['tokens_per_s_min']:.0f}, "
          f"{r['tokens_per_s_max']:.0f}]")
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump({"cpu": cpu_model(), "full_step": full, "scaling": results}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
