"""Instruct-style checkpoints built locally: byte-level BPE tokenizers with tool-calling chat
templates, and tiny random Qwen2 / Llama models saved with transformers (host code).

Nothing is downloaded. The two templates are the project's own text, written to behave like the
families they are named after: `QWEN_STYLE_TEMPLATE` lists the tools' JSON schemas in the system
message, writes a call as JSON inside `<tool_call>` tags and a tool result as a user turn inside
`<tool_response>` tags, turns ending in `<|im_end|>`; `LLAMA31_STYLE_TEMPLATE` starts with the
BOS token, lists the tools in the system header, writes a call as one JSON object
`{"name", "parameters"}` and a tool result as an `ipython` turn, turns ending in `<|eot_id|>`.
They let tests, smoke runs and docs exercise `format='chat'` the way a real instruct checkpoint
would (`rlagents.episodes.ChatFormat`).
"""

import os
from typing import Iterable, Sequence

import tokenizers
from tokenizers import decoders
from tokenizers import models
from tokenizers import pre_tokenizers
from tokenizers import trainers
import transformers

QWEN_STYLE_TEMPLATE = (
    "{%- if messages and messages[0].role == 'system' %}"
    "{%- set system = messages[0].content %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}{%- if system %}{{- system + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\nFunctions you may call, one JSON schema a line:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\nTo call one, write <tool_call>\\n{\"name\": name, \"arguments\": "
    "object}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif system %}{{- '<|im_start|>system\\n' + system + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in rest %}"
    "{%- if message.role == 'user' %}"
    "{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + call.function.name + '\", \"arguments\": ' }}"
    "{{- call.function.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or rest[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

LLAMA31_STYLE_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages and messages[0].role == 'system' %}"
    "{%- set system = messages[0].content %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system }}"
    "{%- if tools %}"
    "{{- '\\n\\nTo call a function, reply with only {\"name\": function name, \"parameters\": "
    "argument object}. Functions:' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- for message in rest %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}"
    "{%- set call = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{\"name\": \"' + call.name + '\", "
    "\"parameters\": ' }}{{- call.arguments | tojson }}{{- '}<|eot_id|>' }}"
    "{%- elif message.role in ('tool', 'ipython') %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content"
    " + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")

# How text is cut before BPE merges, in the manner of Qwen2's and Llama-3's tokenizers.
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Per style: the template, the special tokens (id 0 first: never written, so padding id 0 is
# never a content token), other added tokens, and the roles of the special tokens.
STYLES = {
    "qwen2.5": dict(
        template=QWEN_STYLE_TEMPLATE, model_type="qwen2",
        special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        added=("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"),
        roles=dict(eos_token="<|im_end|>", pad_token="<|endoftext|>")),
    "llama3.1": dict(
        template=LLAMA31_STYLE_TEMPLATE, model_type="llama",
        special=("<|end_of_text|>", "<|begin_of_text|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"),
        added=(),
        roles=dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")),
}


def build_bpe_tokenizer(texts: Iterable[str], *, style: str, vocab_size: int = 512,
                        template: str | None = None) -> transformers.PreTrainedTokenizerFast:
  """A byte-level BPE tokenizer trained on `texts`, with `style`'s special tokens and template.

  Text is split before the merges as Qwen2's and Llama-3's tokenizers split it (`SPLIT_PATTERN`:
  letters, single digits, punctuation with the newlines after it, runs of newlines), so a run
  of newlines is one piece whatever follows it, and arithmetic stays digit by digit.

  Args:
    texts: the training text (e.g. rendered conversations of the task).
    style: 'qwen2.5' or 'llama3.1' (`STYLES`).
    vocab_size: the BPE vocabulary, special and added tokens included.
    template: a chat template instead of the style's (None: the style's; '' for none).
  """
  if style not in STYLES:
    raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
  spec = STYLES[style]
  backend = tokenizers.Tokenizer(models.BPE())
  backend.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(tokenizers.Regex(SPLIT_PATTERN), behavior="isolated"),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  backend.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(spec["special"]),
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  backend.train_from_iterator(list(texts), trainer=trainer)
  backend.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False)
                      for t in spec["added"]])
  tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **spec["roles"])
  tokenizer.add_special_tokens({"additional_special_tokens": [
      t for t in spec["special"] if t not in spec["roles"].values()]})
  tokenizer.chat_template = spec["template"] if template is None else (template or None)
  return tokenizer


def save_tiny_chat_model(path: str, tokenizer: transformers.PreTrainedTokenizerBase, *,
                         style: str, hidden_size: int = 64, num_layers: int = 2,
                         num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 128,
                         max_position_embeddings: int = 512, seed: int = 0) -> str:
  """Saves a randomly initialised Qwen2 ('qwen2.5') or Llama ('llama3.1') causal LM with
  `tokenizer` to `path` with transformers (config, safetensors, tokenizer, chat template).

  Weights are drawn with standard deviation `hidden_size ** -0.5`: with transformers' default
  0.02 the calculator chat smoke run (width 128, 400 SFT steps) ended SFT at loss 0.48 and
  held-out success 0 (it wrote the call format but copied no numbers); with `128 ** -0.5` the
  same run reached loss 0.14.

  Returns `path`.
  """
  import torch  # only for building the random checkpoint

  spec = STYLES[style]
  cls_config, cls_model = {
      "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
      "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}[spec["model_type"]]
  config = cls_config(
      vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=num_layers,
      num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
      intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings,
      tie_word_embeddings=True, initializer_range=hidden_size ** -0.5,
      bos_token_id=tokenizer.bos_token_id,
      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
  torch.manual_seed(seed)
  model = cls_model(config)
  os.makedirs(path, exist_ok=True)
  model.save_pretrained(path, safe_serialization=True)
  tokenizer.save_pretrained(path)
  return path


def conversation_texts(style: str, examples: Sequence[tuple[str, str, str]],
                       tools: Sequence[dict], *,
                       system_prompt: str = "") -> list[str]:
  """Texts to train a style's tokenizer on: per `(prompt, call_input, result)` example, the
  style's rendering of the prompt, a call of the first tool with `call_input`, the result as
  the tool's reply and as the final answer.

  Rendered with the style's template (through a stand-in tokenizer), so the BPE merges see the
  text the trained tokenizer will be asked to encode.
  """
  spec = STYLES[style]
  stand_in = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tokenizers.Tokenizer(models.BPE()), **spec["roles"])
  stand_in.chat_template = spec["template"]
  name = tools[0]["function"]["name"]
  system = [{"role": "system", "content": system_prompt}] if system_prompt else []
  texts = []
  for prompt, call_input, result in examples:
    messages = system + [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": {"input": call_input}}}]},
        {"role": "tool", "content": result},
        {"role": "assistant", "content": result}]
    texts.append(stand_in.apply_chat_template(messages, tools=list(tools), tokenize=False))
  return texts
