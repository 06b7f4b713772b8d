"""Tokenizers and Hugging Face interoperability (host code)."""

from rlagents.hf.tokenizer import SPECIAL_TOKENS
from rlagents.hf.tokenizer import build_char_tokenizer
from rlagents.hf.tokenizer import CHARACTERS

__all__ = ["SPECIAL_TOKENS", "CHARACTERS", "build_char_tokenizer"]
