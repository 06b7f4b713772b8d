"""Neural networks: the decoder transformer policy and its KV cache."""

from rlagents.networks.transformer import init_cache
from rlagents.networks.transformer import KVCache
from rlagents.networks.transformer import RopeScaling
from rlagents.networks.transformer import token_logprobs
from rlagents.networks.transformer import Transformer
from rlagents.networks.transformer import TransformerConfig

__all__ = [
    "init_cache",
    "KVCache",
    "RopeScaling",
    "token_logprobs",
    "Transformer",
    "TransformerConfig",
]
