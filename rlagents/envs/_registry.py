"""Environments by name, so configs can pick one with a string."""

from rlagents.envs import _api
from rlagents.envs import _cartpole
from rlagents.envs import _maze

_BUILT_IN = {
    "CartPole-v1": _cartpole.CartPole,
    "KeyDoorMaze-v0": _maze.KeyDoorMaze,
    "ProceduralKeyDoorMaze-v0": _maze.ProceduralKeyDoorMaze,
}
ENVIRONMENTS = tuple(_BUILT_IN)
GYMNAX_PREFIX = "gymnax/"
CRAFTAX_PREFIX = "craftax/"


def make(name: str, **kwargs) -> _api.Environment:
  """Builds an environment: a built-in name (`ENVIRONMENTS`) or 'gymnax/<gymnax id>'.

  Keyword arguments go to the constructor (e.g. `make('KeyDoorMaze-v0', max_episode_steps=100)`).

  Args:
    name: e.g. 'CartPole-v1', 'KeyDoorMaze-v0' or 'gymnax/Acrobot-v1'.
    **kwargs: the environment's constructor arguments.

  Raises:
    InvalidEnvironmentError: an unknown name (the message lists the valid ones).
  """
  if name in _BUILT_IN:
    return _BUILT_IN[name](**kwargs)
  if name.startswith(GYMNAX_PREFIX):
    from rlagents.envs import _gymnax  # pylint: disable=g-import-not-at-top
    return _gymnax.GymnaxEnv.from_name(name[len(GYMNAX_PREFIX):], **kwargs)
  if name.startswith(CRAFTAX_PREFIX):
    from rlagents.envs import _craftax  # pylint: disable=g-import-not-at-top
    return _craftax.CraftaxEnv.from_name(name[len(CRAFTAX_PREFIX):], **kwargs)
  valid = ", ".join(repr(n) for n in ENVIRONMENTS)
  raise ValueError(f"Unknown environment {name!r}; valid choices: {valid}, or "
                   f"'{GYMNAX_PREFIX}<id>' for a gymnax environment, or '{CRAFTAX_PREFIX}<id>' for a "
                   f"craftax one.")
