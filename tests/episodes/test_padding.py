"""Padded batches whose real tokens include id 0 (Qwen2's `!` is id 0)."""

import jax.numpy as jnp
import numpy as np

from rlagents import episodes
from rlagents import networks


def _rows():
  tokens = np.array([[5, 0, 0, 7, 0, 0, 0, 0],    # id 0 inside the row
                     [3, 4, 0, 0, 0, 0, 0, 0],
                     [9, 9, 9, 9, 0, 0, 0, 0],    # its last token, masked, is id 0
                     [0, 0, 0, 0, 0, 0, 0, 0]], np.int32)
  mask = np.zeros(tokens.shape, np.float32)
  mask[0, 3] = mask[2, 2:5] = 1
  return tokens, mask


def test_lengths_are_read_from_the_last_real_position_not_counted():
  tokens, mask = _rows()
  np.testing.assert_array_equal(episodes.sequence_lengths(tokens), [4, 2, 4, 0])
  np.testing.assert_array_equal(episodes.sequence_lengths(tokens, mask), [4, 2, 5, 0])


def test_a_masked_id_zero_at_the_end_is_not_trimmed():
  tokens, mask = _rows()
  batch = episodes.trim_to_longest({"tokens": tokens, "loss_mask": mask}, multiple=1)
  assert batch["tokens"].shape == (4, 5) and batch["loss_mask"][2].sum() == 3
  assert episodes.trim_to_longest({"tokens": tokens}, multiple=1)["tokens"].shape == (4, 4)


def test_the_reward_model_reads_the_last_position_not_the_count(monkeypatch):
  tokens, _ = _rows()
  values = jnp.arange(32, dtype=jnp.float32).reshape(4, 8)  # a row's value at t: 8 * row + t
  monkeypatch.setattr(networks._reward_model, "token_values", lambda *args: values)
  scores = networks.sequence_scores(None, None, jnp.asarray(tokens))
  np.testing.assert_array_equal(scores, [3, 9, 19, 24])
