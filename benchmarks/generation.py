"""Generated tokens/s: rlagents `generate_segment` against transformers `generate` (PyTorch CPU).

Run: `python benchmarks/generation.py --shape=tiny --json=/tmp/generation.json`
(flags: --shape tiny|larger, --batches 1,8,64, --repeats 3, --threads 2, --buffer_len 96).

Both sides run the same random Qwen2-style model: it is built in transformers, saved, and loaded
into rlagents with `rlagents.hf.load_pretrained`. The work is the BENCH.md setting: prompts of 32
random tokens, exactly 64 new tokens per row (no stop token here; EOS disabled there, and
`min_new_tokens` forces the length), sampling at temperature 1 with top-k and top-p off on both
sides. The sides run one after the other; PyTorch gets `--threads` threads. rlagents' first call
per batch size (the compile) is timed separately; each side gets one warm-up call, then
`--repeats` timed calls; the median, min and max are reported, and ratio = ours / transformers in
tokens/s (above 1: rlagents is faster). rlagents generates into a buffer of `--buffer_len` slots
(by default exactly prompt + new tokens); transformers' cache grows with the tokens, so a longer
buffer shows what a buffer sized for longer episodes costs us.

Each batch also prints a ceiling: the tokens/s of a generation that does nothing but the model's
matrix multiplies (every layer's projections and the LM head over the prompt, then one token per
row per step, jitted, in a loop like the sampler's), which no float32 implementation on this
machine beats by much; `ceiling / transformers` bounds the ratio reachable here.
"""

import json
import statistics
import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

from rlagents.metrics import cpu_model
from rlagents import hf
from rlagents import networks
from rlagents import sampling

_SHAPE = flags.DEFINE_enum("shape", "tiny", ["tiny", "larger"], "Model shape from BENCH.md.")
_BATCHES = flags.DEFINE_list("batches", ["1", "8", "64"], "Batch sizes.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls per side and batch.")
_THREADS = flags.DEFINE_integer("threads", 2, "PyTorch intra-op threads.")
_JSON = flags.DEFINE_string("json", None, "Also write the figures to this JSON file.")

SHAPES = {
    "tiny": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=768, vocab_size=512),
    "larger": dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                   num_key_value_heads=4, intermediate_size=1536, vocab_size=8192),
}
PROMPT_LEN = 32
NEW_TOKENS = 64
_BUFFER_LEN = flags.DEFINE_integer(
    "buffer_len", PROMPT_LEN + NEW_TOKENS,
    "Slots of rlagents' token buffer and KV cache (transformers' cache grows with the tokens).")


def _summary(seconds: list[float], tokens: int) -> dict:
  rates = [tokens / s for s in seconds]
  return {"tokens_per_s_median": statistics.median(rates), "tokens_per_s_min": min(rates),
          "tokens_per_s_max": max(rates), "seconds": seconds}


def _time_ours(loaded, batch: int, repeats: int) -> tuple[float, list[float]]:
  model = networks.Transformer(loaded.config)
  buffer_len = _BUFFER_LEN.value
  rng = np.random.default_rng(batch)

  def call(seed):
    tokens = np.zeros((batch, buffer_len), np.int32)
    tokens[:, :PROMPT_LEN] = rng.integers(0, loaded.config.vocab_size, (batch, PROMPT_LEN))
    tokens = jnp.asarray(tokens)
    jax.block_until_ready(tokens)
    start = time.perf_counter()
    out = sampling.generate_segment(
        loaded.params, tokens, jnp.full((batch,), PROMPT_LEN), jnp.ones((batch,), bool),
        jax.random.key(seed), model=model, max_new_tokens=NEW_TOKENS, stop_tokens=(),
        temperature=1.0)
    jax.block_until_ready(out)
    seconds = time.perf_counter() - start
    assert int(out.generated_mask.sum()) == batch * NEW_TOKENS
    return seconds

  first = call(0)
  call(1)  # warm-up
  timed = [call(seed + 2) for seed in range(repeats)]
  return first - statistics.median(timed), timed


def _time_matmul_only(loaded, batch: int, repeats: int) -> list[float]:
  """Seconds of a generation made of the model's matmuls alone (no attention, norms, sampling).

  The same work as a real call: one pass over the `batch x PROMPT_LEN` prompt tokens, then
  `NEW_TOKENS` steps of `batch` tokens each, every layer's projections and the LM head, with the
  weights passed in as arguments.
  """
  tree = loaded.params["params"]
  layers = [tree[name] for name in sorted(
      (name for name in tree if name.startswith("layers_")), key=lambda n: int(n.split("_")[1]))]
  head = (tree["lm_head"]["kernel"] if "lm_head" in tree else tree["embed_tokens"]["embedding"].T)

  def forward(layers, head, x):
    for layer in layers:
      attn, mlp = layer["self_attn"], layer["mlp"]
      q = x @ attn["q_proj"]["kernel"]
      kv = (x @ attn["k_proj"]["kernel"]).sum(-1) + (x @ attn["v_proj"]["kernel"]).sum(-1)
      x = x + q @ attn["o_proj"]["kernel"] + 1e-6 * kv[:, None]
      x = x + (jax.nn.silu(x @ mlp["gate_proj"]["kernel"]) * (x @ mlp["up_proj"]["kernel"])
               ) @ mlp["down_proj"]["kernel"]
    return x + 1e-6 * (x @ head).mean(-1, keepdims=True)

  # The weights are arguments, as in a real call. Closed over, they would be constants of the
  # program, which XLA multiplies with faster (measured on 2 CPU cores, in one process: the
  # larger shape 6-9% at batch 8 and 5% at batch 64, the tiny one equal at batch 64): a speed
  # that no generator whose weights change between training steps has.
  @jax.jit
  def run(prompt, layers, head):
    last = forward(layers, head, prompt).reshape(batch, PROMPT_LEN, -1)[:, -1]
    return jax.lax.fori_loop(0, NEW_TOKENS, lambda _, x: forward(layers, head, x), last)

  prompt = jnp.full((batch * PROMPT_LEN, head.shape[0]), 0.01, jnp.float32)
  jax.block_until_ready(run(prompt, layers, head))
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(run(prompt, layers, head))
    seconds.append(time.perf_counter() - start)
  return seconds


def _time_transformers(torch_model, batch: int, repeats: int, vocab_size: int) -> list[float]:
  rng = np.random.default_rng(batch)

  def call(seed):
    torch.manual_seed(seed)
    prompt = torch.tensor(rng.integers(0, vocab_size, (batch, PROMPT_LEN)), dtype=torch.long)
    start = time.perf_counter()
    with torch.no_grad():
      out = torch_model.generate(
          prompt, attention_mask=torch.ones_like(prompt), do_sample=True, temperature=1.0,
          top_k=0, top_p=1.0, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
          eos_token_id=None, pad_token_id=0)
    seconds = time.perf_counter() - start
    assert out.shape == (batch, PROMPT_LEN + NEW_TOKENS)
    return seconds

  call(0)  # warm-up
  return [call(seed + 1) for seed in range(repeats)]


def main(argv):
  del argv
  if _BUFFER_LEN.value < PROMPT_LEN + NEW_TOKENS:
    raise app.UsageError(f"--buffer_len must hold the prompt and the new tokens "
                         f"({PROMPT_LEN + NEW_TOKENS}), got {_BUFFER_LEN.value}.")
  torch.set_num_threads(_THREADS.value)
  torch.manual_seed(0)
  hf_config = transformers.Qwen2Config(
      **SHAPES[_SHAPE.value], max_position_embeddings=_BUFFER_LEN.value,
      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=0)
  torch_model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
  n_params = sum(p.numel() for p in torch_model.parameters())
  with tempfile.TemporaryDirectory() as path:
    torch_model.save_pretrained(path)
    hf.build_char_tokenizer().save_pretrained(path)
    loaded = hf.load_pretrained(path)

  results = []
  for batch in map(int, _BATCHES.value):
    compile_s, ours = _time_ours(loaded, batch, _REPEATS.value)
    theirs = _time_transformers(torch_model, batch, _REPEATS.value, hf_config.vocab_size)
    ceiling = _time_matmul_only(loaded, batch, _REPEATS.value)
    tokens = batch * NEW_TOKENS
    row = {"batch": batch, "ours": _summary(ours, tokens), "ours_compile_s": compile_s,
           "transformers": _summary(theirs, tokens), "matmul_only": _summary(ceiling, tokens)}
    row["ratio"] = row["ours"]["tokens_per_s_median"] / row["transformers"]["tokens_per_s_median"]
    row["ceiling_ratio"] = (row["matmul_only"]["tokens_per_s_median"]
                            / row["transformers"]["tokens_per_s_median"])
    results.append(row)
    print(f"batch {batch:3d}: rlagents {row['ours']['tokens_per_s_median']:9,.0f} tok/s "
          f"[{row['ours']['tokens_per_s_min']:,.0f}-{row['ours']['tokens_per_s_max']:,.0f}] "
          f"(compile {compile_s:.1f} s) | transformers "
          f"{row['transformers']['tokens_per_s_median']:8,.0f} tok/s "
          f"[{row['transformers']['tokens_per_s_min']:,.0f}-"
          f"{row['transformers']['tokens_per_s_max']:,.0f}] | ratio {row['ratio']:.2f}x | "
          f"matmul-only ceiling {row['matmul_only']['tokens_per_s_median']:,.0f} tok/s "
          f"({row['ceiling_ratio']:.2f}x transformers)", flush=True)

  report = {
      "benchmark": "generation", "shape": _SHAPE.value, "parameters": n_params,
      "prompt_len": PROMPT_LEN, "new_tokens": NEW_TOKENS, "buffer_len": _BUFFER_LEN.value,
      "repeats": _REPEATS.value,
      "torch_threads": _THREADS.value, "cpu": cpu_model(),
      "versions": {"jax": jax.__version__, "torch": torch.__version__,
                   "transformers": transformers.__version__},
      "jax_devices": [str(d) for d in jax.devices()], "results": results,
  }
  print(json.dumps({k: v for k, v in report.items() if k != "results"}))
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(report, f, indent=1)


if __name__ == "__main__":
  app.run(main)
