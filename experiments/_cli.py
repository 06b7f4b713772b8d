"""Command-line checks shared by the entry points (host code): bad input is one line, not a trace.

ml_collections reports an unknown `--config.x=...` key or a bad config variant with a long
traceback; these checks run before absl parses the flags and exit with `error: ...` naming the
key and the closest valid one.
"""

import difflib
import sys
from collections.abc import Callable, Sequence

import ml_collections


def closest(name: str, choices) -> str:
  """`, did you mean 'x'?` for the closest of `choices` to `name`, or '' if none is close."""
  close = difflib.get_close_matches(name, sorted(choices), n=1)
  return f", did you mean '{close[0]}'?" if close else ""


def check_config_key(config: ml_collections.ConfigDict, dotted_key: str) -> None:
  """Raises `KeyError` with a one-line message unless `dotted_key` names a field of `config`.

  Args:
    config: the experiment's config (any variant: they share their keys).
    dotted_key: e.g. 'ppo.learning_rate'. Keys under an empty ConfigDict (free-form keyword
      arguments such as `env.kwargs`) are accepted.
  """
  node = config
  parts = dotted_key.split(".")
  for depth, part in enumerate(parts):
    if not isinstance(node, ml_collections.ConfigDict) or (depth and not node.keys()):
      return
    if part not in node:
      where = ".".join(parts[:depth]) or "config"
      raise KeyError(f"unknown config key '{dotted_key}'{closest(part, node.keys())} ('{part}' "
                     f"is not a field of '{where}'; valid: {', '.join(sorted(node.keys()))})")
    node = node[part]


def _variant(argv: Sequence[str], default_file: str) -> str | None:
  """The variant after the colon of `--config=<default file>:variant`, '' for none, None if the
  run uses another config file (whose keys this module cannot know without running it)."""
  for arg in argv[1:]:
    if arg.startswith("--config="):
      path, _, variant = arg[len("--config="):].partition(":")
      return variant if path.endswith(default_file) else None
  return ""


def exit_on_bad_config(argv: Sequence[str], default_file: str,
                       get_config: Callable[[str], ml_collections.ConfigDict]) -> None:
  """Exits with `error: ...` on a bad variant or an unknown `--config.` key; else returns.

  Args:
    argv: `sys.argv`.
    default_file: the config file's name, e.g. 'control.py'.
    get_config: that file's `get_config(variant)`.
  """
  variant = _variant(argv, default_file)
  if variant is None:
    return
  try:
    config = get_config(variant)
  except ValueError as e:
    sys.exit(f"error: {e}")
  for arg in argv[1:]:
    if arg.startswith("--config."):
      try:
        check_config_key(config, arg[len("--config."):].split("=", 1)[0])
      except KeyError as e:
        sys.exit(f"error: {e.args[0]}")
