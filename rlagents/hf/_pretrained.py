"""Load Hugging Face Llama / Qwen2 checkpoints from a local directory, and export back (host code).

A checkpoint directory holds `config.json`, the weights as `model.safetensors` or as shards listed
in `model.safetensors.index.json`, and tokenizer files. Nothing here touches the network: the
config and tokenizer are read by transformers with `local_files_only=True`, and a missing file is
an error that names it.

Weights map onto `rlagents.networks.Transformer` parameters by name: `model.layers.3.mlp.up_proj.
weight` is `params['layers_3']['mlp']['up_proj']['kernel']`, transposed (PyTorch `Linear` stores
`[out, in]`, Flax `Dense` `[in, out]`); norm weights are `scale`, the embedding is `embedding`.
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import safetensors
import safetensors.numpy
import transformers

from rlagents.networks import transformer as transformer_lib

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
# Buffers some exporters write that are recomputed from the config, never parameters.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class CheckpointError(ValueError):
  """A checkpoint directory that cannot be loaded as it is; the message names the file or field."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pretrained:
  """A loaded checkpoint.

  Attributes:
    config: the architecture, for `rlagents.networks.Transformer(config)`.
    params: the model variables, `{'params': ...}`, as `jax.Array`s of `config.param_dtype`.
    tokenizer: the checkpoint's tokenizer; it has an EOS token, and a pad token (EOS if the
      checkpoint names none).
    model_type: the Hugging Face `model_type`, 'llama' or 'qwen2'.
  """

  config: transformer_lib.TransformerConfig
  params: dict
  tokenizer: transformers.PreTrainedTokenizerBase
  model_type: str


def _field(hf_config, name, default=None):
  value = getattr(hf_config, name, default)
  return default if value is None else value


def _rope_settings(hf_config, source: str):
  """`(theta, RopeScaling | None)` from a transformers 5 `rope_parameters` or a 4.x config."""
  parameters = getattr(hf_config, "rope_parameters", None)
  field = "rope_parameters"
  if parameters is None:  # transformers 4: `rope_theta` beside an optional `rope_scaling`.
    parameters = dict(getattr(hf_config, "rope_scaling", None) or {})
    parameters.setdefault("rope_theta", _field(hf_config, "rope_theta", 10000.0))
    field = "rope_scaling"
  rope_type = parameters.get("rope_type", parameters.get("type", "default"))
  theta = float(parameters.get("rope_theta", 10000.0))
  if rope_type == "default":
    return theta, None
  if rope_type == "llama3":
    try:
      return theta, transformer_lib.RopeScaling(
          factor=float(parameters["factor"]),
          low_freq_factor=float(parameters["low_freq_factor"]),
          high_freq_factor=float(parameters["high_freq_factor"]),
          original_max_len=int(parameters["original_max_position_embeddings"]))
    except KeyError as missing:
      raise CheckpointError(f"{source}: {field} of rope_type 'llama3' lacks {missing}.") from None
  raise CheckpointError(f"{source}: {field}.rope_type {rope_type!r} is not supported (supported: "
                        "'default', 'llama3').")


def config_from_hf(hf_config: transformers.PretrainedConfig, *, max_len: int | None = None,
                   dtype: str = "float32", param_dtype: str = "float32",
                   source: str = CONFIG_FILE) -> transformer_lib.TransformerConfig:
  """The `TransformerConfig` of a transformers Llama or Qwen2 config.

  Args:
    hf_config: a `LlamaConfig` or `Qwen2Config`.
    max_len: longest sequence the model is used with; default `max_position_embeddings`.
    dtype: activation dtype name.
    param_dtype: parameter dtype name.
    source: what to name in errors (the config file).

  Raises:
    CheckpointError: naming the field, for an unsupported model type or setting.
  """
  model_type = getattr(hf_config, "model_type", None)
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise CheckpointError(f"{source}: model_type {model_type!r} is not supported (supported: "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)}).")
  if _field(hf_config, "hidden_act", "silu") != "silu":
    raise CheckpointError(f"{source}: hidden_act {hf_config.hidden_act!r} is not supported "
                          "(only 'silu').")
  if model_type == "llama":
    for name in ("attention_bias", "mlp_bias"):
      if _field(hf_config, name, False):
        raise CheckpointError(f"{source}: {name}=True is not supported for llama.")
  if model_type == "qwen2" and _field(hf_config, "use_sliding_window", False):
    raise CheckpointError(f"{source}: use_sliding_window=True is not supported.")
  n_heads = hf_config.num_attention_heads
  head_dim = _field(hf_config, "head_dim", hf_config.hidden_size // n_heads)
  if head_dim * n_heads != hf_config.hidden_size:
    raise CheckpointError(f"{source}: head_dim {head_dim} x num_attention_heads {n_heads} != "
                          f"hidden_size {hf_config.hidden_size} is not supported.")
  theta, scaling = _rope_settings(hf_config, source)
  try:
    return transformer_lib.TransformerConfig(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        n_layers=hf_config.num_hidden_layers,
        n_heads=n_heads,
        n_kv_heads=_field(hf_config, "num_key_value_heads", n_heads),
        d_ff=hf_config.intermediate_size,
        max_len=max_len or hf_config.max_position_embeddings,
        rope_theta=theta,
        rope_scaling=scaling,
        rms_norm_eps=hf_config.rms_norm_eps,
        tie_embeddings=bool(_field(hf_config, "tie_word_embeddings", False)),
        attention_bias=model_type == "qwen2",
        dtype=dtype,
        param_dtype=param_dtype,
    )
  except ValueError as error:
    raise CheckpointError(f"{source}: {error}") from None


def _hf_name(path: tuple[str, ...]) -> tuple[str, bool]:
  """Hugging Face tensor name of our parameter `path`, and whether it is stored transposed."""
  *modules, leaf = path
  modules = [f"layers.{m[len('layers_'):]}" if m.startswith("layers_") else m for m in modules]
  name = ".".join(modules + ["bias" if leaf == "bias" else "weight"])
  return (name if modules == ["lm_head"] else f"model.{name}"), leaf == "kernel"


def _param_shapes(config: transformer_lib.TransformerConfig) -> dict:
  model = transformer_lib.Transformer(config)
  tokens = jnp.zeros((1, 1), jnp.int32)
  shapes = jax.eval_shape(model.init, jax.random.key(0), tokens, tokens)
  return {tuple(k.key for k in path): leaf.shape
          for path, leaf in jax.tree_util.tree_leaves_with_path(shapes["params"])}


def _weight_files(path: str) -> dict[str, str]:
  """Tensor name -> safetensors file holding it, from the index or the single file."""
  index_path = os.path.join(path, WEIGHTS_INDEX_FILE)
  if os.path.exists(index_path):
    with open(index_path) as f:
      try:
        weight_map = json.load(f)["weight_map"]
      except (json.JSONDecodeError, KeyError) as error:
        raise CheckpointError(f"{index_path}: not a safetensors index with a weight_map "
                              f"({error}).") from None
    for shard in sorted(set(weight_map.values())):
      if not os.path.exists(os.path.join(path, shard)):
        raise CheckpointError(f"{os.path.join(path, shard)}: shard listed in {WEIGHTS_INDEX_FILE} "
                              "is missing.")
    return {name: os.path.join(path, shard) for name, shard in weight_map.items()}
  single = os.path.join(path, WEIGHTS_FILE)
  if not os.path.exists(single):
    raise CheckpointError(f"{path}: no {WEIGHTS_FILE} or {WEIGHTS_INDEX_FILE} (only safetensors "
                          "weights are read).")
  with safetensors.safe_open(single, framework="numpy") as f:
    return {name: single for name in f.keys()}


def _read_params(path: str, config: transformer_lib.TransformerConfig) -> dict:
  files = _weight_files(path)
  expected = {}
  for our_path, shape in _param_shapes(config).items():
    name, transposed = _hf_name(our_path)
    expected[name] = (our_path, tuple(reversed(shape)) if transposed else tuple(shape), transposed)
  unexpected = sorted(
      name for name in files if name not in expected and not name.endswith(_IGNORED_SUFFIXES)
      and not (config.tie_embeddings and name == "lm_head.weight"))
  if unexpected:
    raise CheckpointError(f"{files[unexpected[0]]}: unexpected tensor(s) {unexpected[:5]} for a "
                          f"{config.n_layers}-layer model with tie_embeddings="
                          f"{config.tie_embeddings}.")
  missing = sorted(name for name in expected if name not in files)
  if missing:
    raise CheckpointError(f"{path}: tensor(s) {missing[:5]} missing from the safetensors "
                          "weights.")
  dtype = config.parameter_dtype
  params = {}
  for file in sorted(set(files.values())):
    with safetensors.safe_open(file, framework="numpy") as f:
      for name in f.keys():
        if name not in expected:
          continue
        our_path, shape, transposed = expected[name]
        got = tuple(f.get_slice(name).get_shape())
        if got != shape:
          raise CheckpointError(f"{file}: tensor {name} has shape {list(got)}, expected "
                                f"{list(shape)}.")
        value = f.get_tensor(name)
        node = params
        for key in our_path[:-1]:
          node = node.setdefault(key, {})
        node[our_path[-1]] = jnp.asarray(value.T if transposed else value, dtype)
  return {"params": params}


def _load_tokenizer(path: str) -> transformers.PreTrainedTokenizerBase:
  try:
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
  except (OSError, ValueError) as error:
    raise CheckpointError(f"{path}: no tokenizer could be loaded ({error}).") from None
  if tokenizer.eos_token_id is None:
    raise CheckpointError(f"{path}: the tokenizer has no eos_token (tokenizer_config.json); "
                          "generation needs it to stop.")
  if tokenizer.pad_token_id is None:
    tokenizer.pad_token = tokenizer.eos_token
  return tokenizer


def load_pretrained(path: str, *, max_len: int | None = None, dtype: str = "float32",
                    param_dtype: str = "float32", value_head: bool = False) -> Pretrained:
  """Loads a local Llama or Qwen2 checkpoint directory.

  Args:
    path: directory with `config.json`, safetensors weights (single or sharded) and a tokenizer.
    max_len: longest sequence the model is used with; default the config's
      `max_position_embeddings`.
    dtype: activation dtype name ('float32' or 'bfloat16').
    param_dtype: parameter dtype name; weights are cast to it.
    value_head: add a PPO value head (`TransformerConfig.value_head`), initialised to zero.

  Returns:
    A `Pretrained` with the config, parameters and tokenizer.

  Raises:
    CheckpointError: naming the file or field, for a missing file, a missing, unexpected or
      mis-shaped tensor, an unsupported model type or setting, or a tokenizer without EOS.
  """
  config_path = os.path.join(path, CONFIG_FILE)
  if not os.path.exists(config_path):
    raise CheckpointError(f"{config_path}: missing (not a Hugging Face checkpoint directory).")
  with open(config_path) as f:
    model_type = json.load(f).get("model_type")
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise CheckpointError(f"{config_path}: model_type {model_type!r} is not supported "
                          f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)}).")
  try:
    hf_config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
  except (KeyError, ValueError, TypeError) as e:
    # transformers checks fields (e.g. the keys a rope_type needs) while it reads the config.
    message = e.args[0] if isinstance(e, KeyError) and e.args else e
    raise CheckpointError(f"{config_path}: {message}") from None
  config = config_from_hf(hf_config, max_len=max_len, dtype=dtype, param_dtype=param_dtype,
                          source=config_path)
  params = _read_params(path, config)
  if value_head:
    config = dataclasses.replace(config, value_head=True)
    dtype = config.parameter_dtype
    params["params"]["value_head"] = {"kernel": jnp.zeros((config.d_model, 1), dtype),
                                      "bias": jnp.zeros((1,), dtype)}
  tokenizer = _load_tokenizer(path)
  if len(tokenizer) > config.vocab_size:
    raise CheckpointError(f"{path}: the tokenizer has {len(tokenizer)} tokens, more than the "
                          f"config's vocab_size {config.vocab_size}.")
  return Pretrained(config=config, params=params, tokenizer=tokenizer, model_type=model_type)


def hf_config_from(config: transformer_lib.TransformerConfig, *, model_type: str,
                   tokenizer: transformers.PreTrainedTokenizerBase | None = None
                   ) -> transformers.PretrainedConfig:
  """The transformers config of our `config`, as `model_type` ('llama' or 'qwen2').

  Raises:
    ValueError: if `model_type` cannot express `config` (Llama has no q/k/v-only biases; Qwen2
      always has them).
  """
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise ValueError(f"model_type must be one of {SUPPORTED_MODEL_TYPES}, got {model_type!r}.")
  if config.attention_bias != (model_type == "qwen2"):
    raise ValueError(f"attention_bias={config.attention_bias} cannot be exported as "
                     f"{model_type!r}: Qwen2 has q/k/v biases, Llama none.")
  rope = {"rope_type": "default", "rope_theta": config.rope_theta}
  if config.rope_scaling is not None:
    scaling = config.rope_scaling
    rope.update(rope_type="llama3", factor=scaling.factor, low_freq_factor=scaling.low_freq_factor,
                high_freq_factor=scaling.high_freq_factor,
                original_max_position_embeddings=scaling.original_max_len)
  cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[model_type]
  if "rope_parameters" in cls().to_dict():
    rope_fields = {"rope_parameters": rope}
  else:  # transformers 4
    theta = rope.pop("rope_theta")
    rope_fields = {"rope_theta": theta, "rope_scaling": None if config.rope_scaling is None
                   else rope}
  special = {}
  if tokenizer is not None:
    special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
               "pad_token_id": tokenizer.pad_token_id}
  return cls(
      vocab_size=config.vocab_size,
      hidden_size=config.d_model,
      num_hidden_layers=config.n_layers,
      num_attention_heads=config.n_heads,
      num_key_value_heads=config.n_kv_heads,
      intermediate_size=config.d_ff,
      max_position_embeddings=max(config.max_len, (config.rope_scaling.original_max_len + 1)
                                  if config.rope_scaling else 0),
      rms_norm_eps=config.rms_norm_eps,
      tie_word_embeddings=config.tie_embeddings,
      hidden_act="silu",
      dtype=config.param_dtype,
      **rope_fields,
      **special,
  )


def export_pretrained(params: dict, config: transformer_lib.TransformerConfig,
                      tokenizer: transformers.PreTrainedTokenizerBase | None, path: str, *,
                      model_type: str | None = None) -> None:
  """Writes `params` as a transformers-loadable directory: config, `model.safetensors`, tokenizer.

  A value head is left out: a causal-LM checkpoint has none. With LoRA, pass the merged
  parameters (`rlagents.networks.merge_lora`).

  Args:
    params: the model variables (`{'params': ...}` or the inner dict), e.g. after training.
    config: their architecture.
    tokenizer: saved beside the weights when given.
    path: output directory (created).
    model_type: 'llama' or 'qwen2'; default 'qwen2' if `config.attention_bias` else 'llama'.
  """
  model_type = model_type or ("qwen2" if config.attention_bias else "llama")
  params = params.get("params", params)
  # A PPO value head (in the config, or trained beside a policy whose config has none) is not
  # part of a causal LM checkpoint.
  params = {name: value for name, value in params.items() if name != "value_head"}
  if config.value_head:
    config = dataclasses.replace(config, value_head=False)
  hf_config = hf_config_from(config, model_type=model_type, tokenizer=tokenizer)
  shapes = _param_shapes(config)
  tensors = {}
  for key_path, leaf in jax.tree_util.tree_leaves_with_path(params):
    our_path = tuple(k.key for k in key_path)
    if our_path not in shapes or tuple(leaf.shape) != tuple(shapes[our_path]):
      raise ValueError(f"Parameter {'/'.join(our_path)} with shape {leaf.shape} does not belong "
                       "to the config's model.")
    name, transposed = _hf_name(our_path)
    value = np.asarray(jax.device_get(leaf)).astype(config.parameter_dtype)
    tensors[name] = np.ascontiguousarray(value.T if transposed else value)
  if len(tensors) != len(shapes):
    missing = sorted("/".join(p) for p in shapes if _hf_name(p)[0] not in tensors)
    raise ValueError(f"Parameters {missing[:5]} are missing.")
  os.makedirs(path, exist_ok=True)
  hf_config.save_pretrained(path)
  safetensors.numpy.save_file(tensors, os.path.join(path, WEIGHTS_FILE), metadata={"format": "pt"})
  if tokenizer is not None:
    tokenizer.save_pretrained(path)
