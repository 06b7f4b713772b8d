"""A character-level tokenizer built locally and wrapped as a transformers tokenizer.

The built-in policy reads and writes one character per token, plus a few special tokens that
delimit the parts of a tool-use episode (see `rlagents.tools` for the text format). Building it
needs no download; it saves and reloads with `save_pretrained` / `AutoTokenizer.from_pretrained`
like any Hugging Face tokenizer.
"""

import string

import tokenizers
from tokenizers import decoders
from tokenizers import models
import transformers

# Order matters: ids are positions in this list, then in CHARACTERS.
SPECIAL_TOKENS = (
    "<pad>",
    "<bos>",
    "<eos>",
    "<unk>",
    "<call>",
    "</call>",
    "<obs>",
    "</obs>",
    "<answer>",
    "</answer>",
)
CHARACTERS = string.digits + string.ascii_lowercase + " +-*/()=?:,.'_"


def build_char_tokenizer(extra_characters: str = "") -> transformers.PreTrainedTokenizerFast:
  """Returns the character-level tokenizer; `<pad>` is id 0.

  `extra_characters` (e.g. a code suite's newline and brackets) get ids after `CHARACTERS`, so
  the ids of the built-in characters never change; "" gives the built-in vocabulary.

  A byte-pair model with an empty merge list is exactly a character model: every character is
  looked up in the vocabulary and unknown ones map to `<unk>`. The `Fuse` decoder joins
  characters back without separators.
  """
  extra = [c for c in dict.fromkeys(extra_characters) if c not in CHARACTERS]
  vocab = {token: index
           for index, token in enumerate(SPECIAL_TOKENS + tuple(CHARACTERS) + tuple(extra))}
  backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
  backend.decoder = decoders.Fuse()
  backend.add_special_tokens(
      [tokenizers.AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=backend,
      bos_token="<bos>",
      eos_token="<eos>",
      pad_token="<pad>",
      unk_token="<unk>",
  )
