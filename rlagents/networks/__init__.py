"""Neural networks: the decoder transformer policy, its KV cache, LoRA adapters, reward models."""

from rlagents.networks._lora import init_lora
from rlagents.networks._lora import LoraConfig
from rlagents.networks._lora import merge_lora
from rlagents.networks._reward_model import reward_model_config
from rlagents.networks._reward_model import reward_model_params
from rlagents.networks._reward_model import sequence_scores
from rlagents.networks._reward_model import token_values
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
    "reward_model_config",
    "reward_model_params",
    "sequence_scores",
    "token_values",
    "init_cache",
    "KVCache",
    "RopeScaling",
    "token_logprobs",
    "Transformer",
    "TransformerConfig",
]
