"""Neural networks: the decoder transformer policy, its KV cache, and LoRA adapters."""

from rlagents.networks._lora import init_lora
from rlagents.networks._lora import LoraConfig
from rlagents.networks._lora import merge_lora
from rlagents.networks.transformer import init_cache
from rlagents.networks.transformer import KVCache
from rlagents.networks.transformer import RopeScaling
from rlagents.networks.transformer import token_logprobs
from rlagents.networks.transformer import Transformer
from rlagents.networks.transformer import TransformerConfig

__all__ = [
    "init_lora",
    "LoraConfig",
    "merge_lora",
    "init_cache",
    "KVCache",
    "RopeScaling",
    "token_logprobs",
    "Transformer",
    "TransformerConfig",
]
