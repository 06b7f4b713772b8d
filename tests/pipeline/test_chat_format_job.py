"""The main job in a checkpoint's own chat template (`format='chat'`): configs, bad input, and
SFT -> GRPO on the calculator from tiny Qwen2- and Llama-style checkpoints (slow)."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from experiments import chat_checkpoint
from experiments.configs import calculator
from rlagents import episodes
from rlagents import hf
from rlagents import networks
from rlagents import pipeline
from rlagents import tasks
from rlagents import tools
from rlagents.hf import chat_models
from rlagents.metrics import read_csv


def _config(init_from="", **top):
  values = calculator.get_config("chat_smoke").to_dict()
  values["init_from"] = init_from
  values.update(top)
  return values


def test_marker_stays_the_default_and_chat_configs_are_checked_in_one_line():
  assert pipeline.AgentJobConfig().format == "marker"
  assert calculator.get_config("smoke").format == "marker"
  with pytest.raises(pipeline.JobError, match=r"^format='chat' renders episodes with a "
                     r"checkpoint's chat template; set init_from to a Hugging Face directory"):
    pipeline.train_and_evaluate(pipeline.config_from_dict(_config()), "/nonexistent/run")
  cases = {
      "format must be one of marker, chat, got 'xml'": _config("/ckpt", format="xml"),
      "rollout_mode='jit' runs the marker format on the built-in character tokenizer only; "
      "format='chat' needs rollout_mode='host'": _config("/ckpt", rollout_mode="jit"),
      "format='chat' runs SFT then algorithm='grpo' or 'ppo'": _config("/ckpt", algorithm="dpo"),
      "format='chat' trains a policy on the calculator suite(s); task='keydoor'":
          _config("/ckpt", task="keydoor"),
      "chat.syntax: tool-call syntax 'xml' is not known to the parser":
          _config("/ckpt", chat={"syntax": "xml"}),
  }
  for message, values in cases.items():
    with pytest.raises(pipeline.ConfigError) as error:
      pipeline.config_from_dict(values)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.fixture(scope="module")
def no_template_checkpoint(tmp_path_factory):
  tokenizer = chat_models.build_bpe_tokenizer(["12+3=? 15"] * 10, style="qwen2.5",
                                              vocab_size=300, template="")
  return chat_models.save_tiny_chat_model(str(tmp_path_factory.mktemp("plain")), tokenizer,
                                          style="qwen2.5", hidden_size=16, intermediate_size=32)


def test_a_checkpoint_without_a_chat_template_is_refused_naming_it(no_template_checkpoint,
                                                                   tmp_path):
  config = pipeline.config_from_dict(_config(no_template_checkpoint))
  with pytest.raises(pipeline.JobError) as error:
    pipeline.train_and_evaluate(config, str(tmp_path / "run"))
  assert str(error.value) == (f"init_from: {no_template_checkpoint}: the tokenizer has no "
                              "chat_template (tokenizer_config.json or chat_template.jinja); "
                              "format='chat' renders episodes with it")


def _metric(workdir, name):
  return {r["step"]: r["value"] for r in read_csv(os.path.join(workdir, "metrics.csv"))
          if r["name"] == name}


@pytest.mark.slow
@pytest.mark.parametrize("style", ["qwen2.5", "llama3.1"])
def test_chat_smoke_job_learns_and_exports_a_checkpoint_transformers_reads(style, tmp_path):
  checkpoint = chat_checkpoint.build_calculator_checkpoint(str(tmp_path / style), style=style)
  config = pipeline.config_from_dict(_config(checkpoint))
  workdir = str(tmp_path / "run")
  report = pipeline.train_and_evaluate(config, workdir)

  # Learning: SFT on the expert rewritten in the model's own call syntax, then GRPO raises
  # held-out success on the same tasks and sampling key.
  curve = _metric(workdir, "eval/heldout_success")
  sft_end = config.sft.num_steps
  assert curve[sft_end] > 0.1, curve
  assert max(v for step, v in curve.items() if step > sft_end) > curve[sft_end] + 0.05, curve
  assert report["splits"]["heldout"]["grpo"]["tool_call_validity"] > 0.5

  # Every logged episode is in the model's syntax and replays from the audit log.
  records = [json.loads(line) for line in open(os.path.join(workdir, "audit", "episodes.jsonl"))]
  syntax = {"qwen2.5": "hermes", "llama3.1": "llama3_json"}[style]
  assert {r.get("syntax") for r in records} == {syntax}
  replayed, divergences = pipeline.replay_workdir(workdir)
  assert replayed == len(records) and not divergences, divergences[:3]

  # The export reloads in transformers and renders the same chat: its tokenizer and template
  # give the ids the job trained on, and its logits are the trained policy's.
  export = os.path.join(workdir, "export")
  specs = lambda task: (tools.CalculatorTool().spec,)
  exported = episodes.ChatFormat(transformers.AutoTokenizer.from_pretrained(export), specs,
                                 source=export)
  trained = episodes.ChatFormat(hf.load_pretrained(checkpoint).tokenizer, specs,
                                source=checkpoint)
  last = next(r for r in reversed(records) if r["phase"] == "final_eval" and r["actions"])
  episode = _episode_from(last, syntax)
  assert exported.pieces(episode) == trained.pieces(episode)
  ids = [i for piece, _ in exported.pieces(episode) for i in piece]
  loaded = hf.load_pretrained(export, max_len=config.model.max_len)
  tokens = jnp.asarray([ids], jnp.int32)
  ours, _ = networks.Transformer(loaded.config).apply(
      loaded.params, tokens, jnp.arange(len(ids), dtype=jnp.int32)[None])
  with torch.no_grad():
    theirs = transformers.AutoModelForCausalLM.from_pretrained(export)(
        torch.tensor([ids])).logits[0].numpy()
  np.testing.assert_allclose(np.asarray(ours[0]), theirs, atol=2e-4)


def _episode_from(record, syntax):
  """The episode of an audit record, its tool results as logged."""
  episode = episodes.Episode(tasks.CalculatorTask(**record["task"]), syntax=syntax)
  for action in record["actions"]:
    result = None
    if action["kind"] == "call":
      call = tools.ToolCall(action["tool"], action["arguments"]) if action["tool"] else None
      result = tools.ToolResult(call, tools.CallStatus(action["status"]), action["observation"])
    episode.actions.append(episodes.Action(action["text"], action["kind"], result))
  return episode
