"""`experiments.plan`: bytes per device from shapes, checked by hand on a tiny config."""

from experiments import plan
from experiments.configs import models

TINY = models.get_config("tiny")  # d 64, 2 layers, 4 heads (head_dim 16), 2 kv heads, d_ff 128,
# vocab 1000, untied, q/k/v biases, float32; 2 sequences x 16 tokens; LoRA rank 16 on all 7.

# Per layer: q 64*64+64, k and v 64*32+32 each, o 64*64, gate/up/down 64*128 each, 2 norms 64.
LAYER = (64 * 64 + 64) + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64  # 37120
PARAMS = 1000 * 64 + 2 * LAYER + 64 + 64 * 1000  # embedding, layers, final norm, lm_head
# LoRA: A [in, 16] and B [16, out] per projection: q 64/64, k 64/32, v 64/32, o 64/64,
# gate 64/128, up 64/128, down 128/64.
ADAPTERS = 2 * 16 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 3 * (64 + 128))  # 32768


def test_full_fine_tuning_on_one_device():
  assert plan.parameter_count(TINY) == PARAMS == 202304
  got = plan.memory(TINY, fsdp=1)
  tokens = 2 * 16
  assert got == {
      "params": PARAMS * 4,
      "optimizer": 2 * PARAMS * 4 + 4,  # AdamW's two moments and one int32 step count
      "gradients": PARAMS * 4,
      # per token and layer 6*64 + 2*2*16 + 3*128 + 4 heads * 16 positions = 896 values,
      # then the float32 logits
      "activations": tokens * 2 * 896 * 4 + tokens * 1000 * 4,
      "kv_cache": tokens * 2 * 2 * 2 * 16 * 4,
  }


def test_fsdp_splits_what_the_jobs_rule_splits():
  # Biases and norms (under 1024 values) stay whole: 2 * (64 + 32 + 32 + 2 * 64) + 64 = 576.
  replicated = 576
  got = plan.memory(TINY, fsdp=8)
  assert got["params"] == ((PARAMS - replicated) // 8 + replicated) * 4
  assert got["gradients"] == got["params"]


def test_lora_trains_only_the_adapters():
  got = plan.memory(TINY, fsdp=1, lora=True)
  assert got["params"] == (PARAMS + ADAPTERS) * 4
  assert got["gradients"] == ADAPTERS * 4
  assert got["optimizer"] == 2 * ADAPTERS * 4 + 4


def test_plan_rows_cover_every_mesh_and_say_what_fits():
  rows = plan.plan_rows(TINY)
  assert {(r["mesh"], r["fsdp"], r["training"]) for r in rows} == {
      (mesh, fsdp, training) for mesh, (devices, _) in plan.MESHES.items()
      for fsdp in {1, devices} for training in ("full", "lora")}
  assert all(r["fits"] and r["total"] == sum(r[f] for f in plan.FIELDS) for r in rows)
