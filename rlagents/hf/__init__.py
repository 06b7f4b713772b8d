"""Tokenizers and Hugging Face interoperability (host code): load local checkpoints, export back."""

from rlagents.hf._pretrained import CheckpointError
from rlagents.hf._pretrained import config_from_hf
from rlagents.hf._pretrained import export_pretrained
from rlagents.hf._pretrained import hf_config_from
from rlagents.hf._pretrained import load_pretrained
from rlagents.hf._pretrained import Pretrained
from rlagents.hf._pretrained import SUPPORTED_MODEL_TYPES
from rlagents.hf.tokenizer import SPECIAL_TOKENS
from rlagents.hf.tokenizer import build_char_tokenizer
from rlagents.hf.tokenizer import CHARACTERS

__all__ = [
    "CheckpointError",
    "config_from_hf",
    "export_pretrained",
    "hf_config_from",
    "load_pretrained",
    "Pretrained",
    "SUPPORTED_MODEL_TYPES",
    "SPECIAL_TOKENS",
    "CHARACTERS",
    "build_char_tokenizer",
]
