"""Checkpointer: whole-state round trip, keep-N, async with donation, atomic saves, and falling
back from a corrupt newest step."""

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlagents import checkpoint


def _train_state(seed: int):
  """A train state like the jobs': params, Adam state (named tuples), step and RNG key."""
  key = jax.random.PRNGKey(seed)
  params = {"dense": {"kernel": jax.random.normal(key, (64, 32)), "bias": jnp.zeros(32)}}
  tx = optax.adam(1e-3)
  opt_state = tx.init(params)
  grads = jax.tree.map(jnp.ones_like, params)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return {"params": params, "opt_state": opt_state, "step": jnp.int32(seed),
          "key": jax.random.fold_in(key, seed)}


def _assert_equal(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  jax.tree.map(np.testing.assert_array_equal, a, b)


def _saved(directory, steps, **kwargs):
  ckpt = checkpoint.Checkpointer(directory, **kwargs)
  for step in steps:
    ckpt.save(step, _train_state(step), {"step": step, "data_position": 10 * step})
  ckpt.close()
  return checkpoint.Checkpointer(directory, **kwargs)


def test_round_trip_of_the_whole_state(tmp_path):
  ckpt = _saved(str(tmp_path), [1, 2])
  state, metadata = ckpt.restore(2, _train_state(0))
  _assert_equal(state, _train_state(2))
  # The optimizer state keeps its named-tuple structure (restored into the target's).
  assert type(state["opt_state"][0]).__name__ == "ScaleByAdamState"
  assert int(state["opt_state"][0].count) == 1
  assert metadata == {"step": 2, "data_position": 20}
  restored = ckpt.restore_latest(_train_state(0))
  assert restored.step == 2 and restored.metadata["data_position"] == 20
  ckpt.close()


def test_keeps_the_newest_n(tmp_path):
  ckpt = _saved(str(tmp_path), [1, 2, 3, 4], max_to_keep=2)
  assert ckpt.all_steps() == [3, 4]
  assert sorted(os.listdir(tmp_path)) == ["3", "4"]
  ckpt.close()


def test_empty_directory_restores_nothing(tmp_path):
  with checkpoint.Checkpointer(str(tmp_path / "new")) as ckpt:
    assert ckpt.restore_latest() is None and ckpt.latest_step() is None


def test_async_save_survives_donation_and_finishes_on_close(tmp_path):
  state = _train_state(3)
  expected = jax.tree.map(np.array, state)
  ckpt = checkpoint.Checkpointer(str(tmp_path), async_save=True)
  ckpt.save(3, state, {"step": 3})
  # The train step donates the state's buffers right after `save` returns (XLA may decline a
  # donation while the save still reads a buffer; either way the saved values must be the ones
  # passed to `save`).
  bump = jax.jit(lambda s: jax.tree.map(lambda x: x + 1, s), donate_argnums=0)
  bump(state)
  ckpt.close()
  assert os.listdir(tmp_path) == ["3"]
  with checkpoint.Checkpointer(str(tmp_path)) as again:
    _assert_equal(again.restore(3, _train_state(0))[0], expected)


def test_a_step_is_written_once(tmp_path):
  ckpt = _saved(str(tmp_path), [4])
  with pytest.raises(checkpoint.CheckpointError, match="step 4 is already there"):
    ckpt.save(4, _train_state(4), {})
  with pytest.raises(checkpoint.CheckpointError, match="step 4 is already there"):
    ckpt.save(2, _train_state(2), {})
  ckpt.close()


def test_an_unfinished_save_is_invisible_and_cleaned_up(tmp_path):
  _saved(str(tmp_path), [1, 2]).close()
  # What SIGKILL leaves mid-save: a partial temporary directory for step 3.
  partial = tmp_path / "3.orbax-checkpoint-tmp"
  shutil.copytree(tmp_path / "2", partial)
  shutil.rmtree(partial / "metadata")
  with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
    assert ckpt.all_steps() == [1, 2]
    assert ckpt.restore_latest(_train_state(0)).step == 2
    ckpt.save(3, _train_state(3), {"step": 3})
  # Removed in the background when the directory is opened; gone once the checkpointer closed.
  assert sorted(os.listdir(tmp_path)) == ["2", "3"]


def _largest_file(directory):
  files = [os.path.join(root, f) for root, _, names in os.walk(directory) for f in names]
  return max(files, key=os.path.getsize)


def _truncate_data(step_dir):
  path = _largest_file(os.path.join(step_dir, "state"))
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) // 2)
  return "corrupt or unreadable"


def _delete_data(step_dir):
  os.remove(_largest_file(os.path.join(step_dir, "state")))
  return "corrupt or unreadable"


def _delete_array_metadata(step_dir):
  os.remove(os.path.join(step_dir, "state", "_METADATA"))
  return "corrupt or unreadable"


def _garbage_in_state_metadata(step_dir):
  with open(os.path.join(step_dir, "state", "_METADATA"), "w") as f:
    f.write("{not json")
  return "corrupt or unreadable"


def _garbage_in_job_metadata(step_dir):
  with open(os.path.join(step_dir, "metadata", "metadata"), "wb") as f:
    f.write(b"\x00\xffgarbage")
  return "corrupt or unreadable"


def _metadata_not_an_object(step_dir):
  with open(os.path.join(step_dir, "metadata", "metadata"), "w") as f:
    f.write("[1, 2]")
  return "not a JSON object"


def _flip_bytes_in_data(step_dir):
  # Still a valid file: only the values differ; the recorded SHA-256 catches it.
  path = _largest_file(os.path.join(step_dir, "state"))
  with open(path, "r+b") as f:
    f.seek(os.path.getsize(path) // 2)
    f.write(bytes(16))
  return "do not match the SHA-256"


def _garble_every_data_file(step_dir):
  for root, _, names in os.walk(os.path.join(step_dir, "state")):
    for name in names:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"\0garbage")
  return "corrupt or unreadable"


CORRUPTIONS = [_truncate_data, _delete_data, _delete_array_metadata, _garbage_in_state_metadata,
               _garbage_in_job_metadata, _metadata_not_an_object, _flip_bytes_in_data,
               _garble_every_data_file]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=[c.__name__[1:] for c in CORRUPTIONS])
def test_corrupt_newest_step_is_reported_and_the_previous_is_used(tmp_path, corrupt):
  ckpt = _saved(str(tmp_path), [1, 2, 3], max_to_keep=3)
  step_dir = os.path.join(str(tmp_path), "3")
  fault = corrupt(step_dir)
  with pytest.raises(checkpoint.CheckpointError, match=fault) as info:
    ckpt.restore(3, _train_state(0))
  assert step_dir in str(info.value) and "\n" not in str(info.value)

  with pytest.warns(checkpoint.CheckpointWarning) as caught:
    restored = ckpt.restore_latest(_train_state(0))
  message = str(caught[0].message)
  assert step_dir in message and fault in message and "falling back" in message
  assert restored.step == 2 and restored.metadata == {"step": 2, "data_position": 20}
  _assert_equal(restored.state, _train_state(2))
  # The corrupt step is set aside, so the resumed run can write step 3 again.
  assert sorted(os.listdir(tmp_path)) == ["1", "2", "corrupt-3"]
  assert ckpt.all_steps() == [1, 2]
  ckpt.save(3, _train_state(3), {"step": 3})
  ckpt.close()
  with checkpoint.Checkpointer(str(tmp_path), max_to_keep=3) as again:
    assert again.restore_latest(_train_state(0)).step == 3


def test_falls_back_over_several_corrupt_steps(tmp_path):
  ckpt = _saved(str(tmp_path), [1, 2, 3], max_to_keep=3)
  _truncate_data(os.path.join(str(tmp_path), "3"))
  _garbage_in_job_metadata(os.path.join(str(tmp_path), "2"))
  with pytest.warns(checkpoint.CheckpointWarning) as caught:
    restored = ckpt.restore_latest(_train_state(0))
  assert restored.step == 1
  assert [os.path.basename(str(w.message).split()[3]) for w in caught] == ["3", "2"]
  assert sorted(os.listdir(tmp_path)) == ["1", "corrupt-2", "corrupt-3"]
  ckpt.close()


def test_no_readable_step_is_a_clear_error_and_nothing_is_moved(tmp_path):
  ckpt = _saved(str(tmp_path), [1, 2])
  for step in (1, 2):
    _delete_data(os.path.join(str(tmp_path), str(step)))
  with pytest.warns(checkpoint.CheckpointWarning):
    with pytest.raises(checkpoint.CheckpointError, match="no readable checkpoint in") as info:
      ckpt.restore_latest(_train_state(0))
  assert "\n" not in str(info.value)
  assert os.path.join(str(tmp_path), "1") in str(info.value)
  assert sorted(os.listdir(tmp_path)) == ["1", "2"]
  ckpt.close()


def test_restoring_a_missing_step_names_it(tmp_path):
  ckpt = _saved(str(tmp_path), [1])
  with pytest.raises(checkpoint.CheckpointError, match="7 does not exist"):
    ckpt.restore(7)
  ckpt.close()


def test_bad_max_to_keep(tmp_path):
  with pytest.raises(ValueError, match="max_to_keep"):
    checkpoint.Checkpointer(str(tmp_path), max_to_keep=0)


def test_other_processes_fall_back_too_but_only_process_0_moves_files(tmp_path, monkeypatch):
  ckpt = _saved(str(tmp_path), [1, 2])
  _truncate_data(os.path.join(str(tmp_path), "2"))
  monkeypatch.setattr(jax, "process_index", lambda: 1)
  with pytest.warns(checkpoint.CheckpointWarning):
    assert ckpt.restore_latest(_train_state(0)).step == 1
  assert sorted(os.listdir(tmp_path)) == ["1", "2"]
  monkeypatch.undo()
  with pytest.warns(checkpoint.CheckpointWarning):
    assert ckpt.restore_latest(_train_state(0)).step == 1
  assert sorted(os.listdir(tmp_path)) == ["1", "corrupt-2"]
  ckpt.close()


def test_typed_prng_keys_round_trip(tmp_path):
  # The control experiment's PPOState holds new-style typed keys, one per seed.
  state = {"key": jax.random.split(jax.random.key(3), 4), "x": jnp.arange(4.0)}
  with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
    ckpt.save(1, state, {})
  target = {"key": jax.random.split(jax.random.key(0), 4), "x": jnp.zeros(4)}
  with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
    restored = ckpt.restore_latest(target).state
  np.testing.assert_array_equal(jax.random.key_data(restored["key"]),
                                jax.random.key_data(state["key"]))


def test_closing_waits_for_the_removal_of_unfinished_saves(tmp_path):
  # A closed checkpointer deletes nothing afterwards: what it removes is gone by `close`.
  _saved(str(tmp_path), [1]).close()
  for attempt in range(5):
    partial = tmp_path / f"{attempt + 2}.orbax-checkpoint-tmp"
    shutil.copytree(tmp_path / "1", partial)
    checkpoint.Checkpointer(str(tmp_path)).close()
    assert sorted(os.listdir(tmp_path)) == ["1"]
