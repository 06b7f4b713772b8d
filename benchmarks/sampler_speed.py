"""Tokens per second of `generate_segment` on the local device (CPU by default).

Run: `python benchmarks/sampler_speed.py` (flags: --batch, --buffer_len, --max_new_tokens,
--repeats, --dtype).

Setting: B=128 sequences in an L=128 buffer, prompts of 40..100 tokens, 24 new tokens each, no stop
token (every row generates all 24), temperature 1 with top-k 0 and top-p 1; model of vocabulary 64,
d_model 128, 3 layers, 4 heads, 2 kv heads, d_ff 384 (--dtype float32 or bfloat16). Prints the
compile time (first call minus a timed call) and the median of `--repeats` timed calls, in wall
time and in this process's CPU time (which other load on the machine inflates less).
"""

import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from rlagents import networks
from rlagents import sampling

_BATCH = flags.DEFINE_integer("batch", 128, "Sequences per call.")
_BUFFER_LEN = flags.DEFINE_integer("buffer_len", 128, "Token buffer length L.")
_MAX_NEW_TOKENS = flags.DEFINE_integer("max_new_tokens", 24, "Decode steps per call.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls; the median is reported.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Activation dtype.")


def main(argv):
  del argv
  batch, buffer_len, max_new = _BATCH.value, _BUFFER_LEN.value, _MAX_NEW_TOKENS.value
  config = networks.TransformerConfig(
      vocab_size=64, d_model=128, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=384,
      max_len=buffer_len, dtype=_DTYPE.value)
  model = networks.Transformer(config)
  init_key, data_key, sample_key = jax.random.split(jax.random.key(0), 3)
  params = model.init(init_key, jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 4), jnp.int32))

  def make_batch(key):
    tokens_key, lengths_key = jax.random.split(key)
    lengths = jax.random.randint(lengths_key, (batch,), 40, min(100, buffer_len - max_new) + 1)
    tokens = jax.random.randint(tokens_key, (batch, buffer_len), 1, config.vocab_size)
    tokens = jnp.where(jnp.arange(buffer_len) < lengths[:, None], tokens, 0)
    return tokens, lengths, jnp.ones((batch,), bool)

  generate = lambda key, data: sampling.generate_segment(
      params, *data, key, model=model, max_new_tokens=max_new, stop_tokens=())

  def timed_call(key):
    data = make_batch(jax.random.fold_in(data_key, key))
    jax.block_until_ready(data)
    start, start_cpu = time.perf_counter(), time.process_time()
    out = generate(jax.random.fold_in(sample_key, key), data)
    jax.block_until_ready(out)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    return seconds, cpu_seconds, int(out.generated_mask.sum())

  first_seconds, _, _ = timed_call(0)
  timings = [timed_call(i + 1) for i in range(_REPEATS.value)]
  median_seconds = statistics.median(seconds for seconds, _, _ in timings)
  median_cpu_seconds = statistics.median(cpu_seconds for _, cpu_seconds, _ in timings)
  generated = timings[0][2]
  print(f"devices: {jax.devices()}, dtype {_DTYPE.value}")
  print(f"B={batch} L={buffer_len} max_new_tokens={max_new}: {generated} tokens per call")
  print(f"compile: {first_seconds - median_seconds:.2f} s")
  print(f"call (median of {_REPEATS.value}): {median_seconds * 1e3:.1f} ms, "
        f"{generated / median_seconds:,.0f} tokens/s; CPU time {median_cpu_seconds * 1e3:.1f} ms")


if __name__ == "__main__":
  app.run(main)
