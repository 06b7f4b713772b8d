"""The job's policy at the start: the built-in model, or a local Hugging Face checkpoint (host code).

With `AgentJobConfig.init_from` set to a checkpoint directory, the architecture, the weights and
the tokenizer come from that checkpoint (`rlagents.hf.load_pretrained`); of `AgentJobConfig.model`
only `max_len`, `dtype`, `param_dtype` and `value_head` apply.

In the marker format (`AgentJobConfig.format='marker'`, the default) episodes are text with
marker tokens (`rlagents.tools`): `<bos>`, `<eos>`, `<call>`,
`</call>`, `<obs>`, `</obs>`, `<answer>`, `</answer>`. The sampler stops on `</call>`,
`</answer>` and `<eos>` token ids, so each marker must be one token of the checkpoint's
tokenizer. A tokenizer without them is refused with an error that lists the missing markers:
adding tokens silently would also mean new, untrained embedding rows, which is a modelling
choice the user should make (add them as special tokens, resize the embeddings, save, and point
`init_from` at the result). In the chat format (`format='chat'`) the checkpoint keeps its own
vocabulary: episodes are rendered by its chat template (`episodes.ChatFormat`), which must
exist and render tools.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from rlagents import hf
from rlagents import networks
from rlagents import episodes as episodes_lib

FORMAT_TOKENS = episodes_lib.MARKERS


class PolicyInitError(ValueError):
  """A checkpoint named by `init_from` that the job cannot start from; names the file or field."""


def check_format_tokens(tokenizer: Any, source: str) -> None:
  """Raises `PolicyInitError` unless every marker of the text format is one token of `tokenizer`.

  Args:
    tokenizer: a transformers tokenizer.
    source: what to name in the error (the tokenizer's directory).
  """
  missing = [token for token in FORMAT_TOKENS
             if tokenizer.encode(token, add_special_tokens=False)
             != [tokenizer.convert_tokens_to_ids(token)]
             or tokenizer.convert_tokens_to_ids(token) == tokenizer.unk_token_id]
  if missing:
    raise PolicyInitError(
        f"{source}: the tokenizer lacks the calculator format's marker token(s) {missing} (each "
        "must be a single token); add them as special tokens, resize the model's embeddings, "
        "save the checkpoint and start from that.")
  if tokenizer.bos_token_id is None:
    raise PolicyInitError(f"{source}: the tokenizer has no bos_token (tokenizer_config.json); "
                          f"the format starts every episode with {episodes_lib.BOS!r}.")


@dataclasses.dataclass(frozen=True)
class InitialPolicy:
  """The policy a job starts from.

  Attributes:
    tokenizer: its tokenizer.
    model_config: its architecture (vocabulary from the tokenizer or the checkpoint).
    params: the checkpoint's variables (with a zero value head if configured); None for the
      built-in model, which the job initialises randomly from its seed.
  """

  tokenizer: Any
  model_config: networks.TransformerConfig
  params: Any = None


def initial_policy(model: networks.TransformerConfig, init_from: str,
                   characters: str = "", episode_format: str = "marker") -> InitialPolicy:
  """The built-in character-level model (`init_from == ''`) or the checkpoint at `init_from`.

  `characters`: what the task suite writes beyond the built-in characters (the built-in
  tokenizer gets them; a checkpoint's tokenizer must already have them).
  `episode_format`: 'marker' checks the checkpoint's tokenizer for the marker tokens; 'chat'
  for a chat template that renders tools.

  Raises:
    PolicyInitError: for a checkpoint that does not load (`hf.CheckpointError`, whose message
      names the file or field) or whose tokenizer cannot write the calculator format.
  """
  if not init_from:
    tokenizer = hf.build_char_tokenizer(characters)
    return InitialPolicy(tokenizer, dataclasses.replace(model, vocab_size=len(tokenizer)))
  if not os.path.isdir(init_from):
    raise PolicyInitError(f"init_from: {init_from!r} is not a directory.")
  try:
    loaded = hf.load_pretrained(init_from, max_len=model.max_len, dtype=model.dtype,
                                param_dtype=model.param_dtype, value_head=model.value_head)
  except hf.CheckpointError as error:
    raise PolicyInitError(f"init_from: {error}") from None
  if episode_format == "marker":
    check_format_tokens(loaded.tokenizer, init_from)
  else:
    try:
      episodes_lib.check_chat_template(loaded.tokenizer, init_from)
    except episodes_lib.FormatError as error:
      raise PolicyInitError(f"init_from: {error}") from None
  return InitialPolicy(loaded.tokenizer, loaded.config, loaded.params)
