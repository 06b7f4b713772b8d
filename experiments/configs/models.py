"""Real model shapes for planning memory (`python -m experiments.plan`), and a tiny one for tests.

    python -m experiments.plan --config=experiments/configs/models.py:qwen2.5-7b
    python -m experiments.plan --config=experiments/configs/models.py:qwen2.5-0.5b \
        --config.lora_rank=16 --config.sequences_per_device=8

The Qwen2.5 shapes are those of the published checkpoints' config.json (hidden size, layers,
heads, key/value heads, MLP width, vocabulary, tied embeddings). Nothing is allocated: the
plan reads shapes from `jax.eval_shape`. To train one, point the job's `init_from` at the
downloaded checkpoint directory; its config.json gives the same architecture.

Fields:
  model: `rlagents.networks.TransformerConfig` fields.
  sequences_per_device: sequences in one update step on each device (activations, KV cache).
  sequence_length: tokens per sequence.
  lora_rank: 0 for full fine-tuning, else the rank of adapters on `lora_targets`.
  lora_targets: the projections that get adapters.
"""

import ml_collections

# name: (hidden, layers, heads, kv_heads, mlp, vocab, tied)
SHAPES = {
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936, True),
    "qwen2.5-1.5b": (1536, 28, 12, 2, 8960, 151936, True),
    "qwen2.5-7b": (3584, 28, 28, 4, 18944, 152064, False),
    "tiny": (64, 2, 4, 2, 128, 1000, False),
}


def get_config(variant: str = "qwen2.5-0.5b") -> ml_collections.ConfigDict:
  variant = variant or "qwen2.5-0.5b"
  if variant not in SHAPES:
    raise ValueError(f"unknown model variant {variant!r}; choose from {', '.join(SHAPES)}")
  hidden, layers, heads, kv_heads, mlp, vocab, tied = SHAPES[variant]
  dtype = "float32" if variant == "tiny" else "bfloat16"
  return ml_collections.ConfigDict({
      "name": variant,
      "model": {
          "vocab_size": vocab, "d_model": hidden, "n_layers": layers, "n_heads": heads,
          "n_kv_heads": kv_heads, "d_ff": mlp, "max_len": 4096 if variant != "tiny" else 128,
          "rope_theta": 1e6, "rms_norm_eps": 1e-6, "tie_embeddings": tied,
          "attention_bias": True, "dtype": dtype, "param_dtype": dtype},
      "sequences_per_device": 4 if variant != "tiny" else 2,
      "sequence_length": 2048 if variant != "tiny" else 16,
      "lora_rank": 0,
      "lora_targets": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
  })
