r"""Builds a tiny instruct-style checkpoint for the calculator in the chat format (no download).

    python -m experiments.chat_checkpoint --out=/tmp/tiny_qwen --style=qwen2.5
    python -m experiments.train_agent --workdir=/tmp/chat_run \
        --config=experiments/configs/calculator.py:chat_smoke \
        --config.init_from=/tmp/tiny_qwen --config.format=chat

The directory is what a user brings: a random Qwen2 ('qwen2.5') or Llama ('llama3.1') causal LM
saved by transformers (config.json, model.safetensors), a byte-level BPE tokenizer trained here
on calculator conversations, and a tool-calling chat template of that family's style
(`rlagents.hf.chat_models`).
"""

from absl import app
from absl import flags
import numpy as np

from rlagents import episodes
from rlagents import tools
from rlagents.hf import chat_models

_OUT = flags.DEFINE_string("out", None, "directory to write the checkpoint to", required=True)
_STYLE = flags.DEFINE_enum("style", "qwen2.5", list(chat_models.STYLES), "template family")


def calculator_examples(count: int, seed: int = 0) -> list[tuple[str, str, str]]:
  """`(prompt, expression, result)` of random calculator problems (2-4 operands, 1-3 digits),
  plus the error observations the calculator returns, for training a tokenizer."""
  rng = np.random.default_rng(seed)
  examples = []
  for _ in range(count):
    numbers = [str(rng.integers(0, 10 ** rng.integers(1, 4))) for _ in range(rng.integers(2, 5))]
    operators = rng.choice(list("+-*"), len(numbers) - 1)
    expression = numbers[0] + "".join(o + n for o, n in zip(operators, numbers[1:]))
    examples.append((f"{expression}=?", expression,
                     str(tools.evaluate_expression(expression))))
  for error in ("error: busy, retry", "error: bad call, use name(args)",
                "error: bad expression", "error: no tool calc"):
    examples += [(prompt, expression, error) for prompt, expression, _ in examples[:50]]
  return examples


def build_calculator_checkpoint(path: str, *, style: str = "qwen2.5", vocab_size: int = 1024,
                                hidden_size: int = 128, num_layers: int = 2,
                                intermediate_size: int = 384, seed: int = 0) -> str:
  """Writes a tiny random `style` checkpoint whose tokenizer was trained on calculator
  conversations in that style; returns `path`."""
  schema = [episodes.tool_schema(tools.CalculatorTool().spec)]
  texts = chat_models.conversation_texts(style, calculator_examples(3000, seed), schema,
                                         system_prompt=episodes.DEFAULT_SYSTEM_PROMPT)
  tokenizer = chat_models.build_bpe_tokenizer(texts, style=style, vocab_size=vocab_size)
  return chat_models.save_tiny_chat_model(
      path, tokenizer, style=style, hidden_size=hidden_size, num_layers=num_layers,
      intermediate_size=intermediate_size, seed=seed)


def main(argv):
  del argv
  print(build_calculator_checkpoint(_OUT.value, style=_STYLE.value))


if __name__ == "__main__":
  app.run(main)
