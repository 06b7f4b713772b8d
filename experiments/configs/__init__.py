"""ml_collections configs of the entry points, each with `get_config(variant)`.

`with_overrides` applies `{'grpo.kl_beta': 0.5, ...}` to a config's plain-dict form, as
`--config.grpo.kl_beta=0.5` does on the command line.
"""

from typing import Any, Mapping


def with_overrides(values: dict, overrides: Mapping[str, Any]) -> dict:
  """`values` (a config's `to_dict()`) with each dotted key of `overrides` set, in place.

  Raises:
    KeyError: a dotted key whose parents are not groups of `values`.
  """
  for dotted, value in overrides.items():
    node = values
    *parents, leaf = dotted.split(".")
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return values
