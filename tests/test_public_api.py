"""The public API of losses, envs, tools and the learners is exported and documented.

Exported: every public function or class defined in a package's private modules (`_x.py`) is
in the package's `__all__` (or named in `_INTERNAL` with the reason). Documented: every exported
callable, and every public callable of a public submodule such as `learners.ppo`, has a
docstring; one that takes arguments documents them in an `Args:` (functions, constructors) or
`Attributes:` (dataclasses) section; public methods have a docstring.
"""

import dataclasses
import enum
import importlib
import inspect
import pkgutil
import typing

import pytest

_PACKAGES = ("rlagents.losses", "rlagents.envs", "rlagents.tools", "rlagents.learners",
             "rlagents.world_models")
# Helpers shared between a package's own modules, not part of what users call.
_INTERNAL = {
    "rlagents.losses": {
        # input checks every loss runs on its arguments
        "as_float", "mask_weights", "check_rank", "check_shape", "check_choice",
        "check_group_size", "check_number", "where_masked", "safe_denominator",
        # building blocks of the exported estimators and aggregations
        "grouped_rewards", "masked_token_mean"},
    "rlagents.learners": {
        # the data-parallel mean the SFT and GRPO updates apply to gradients and metrics
        "reduce_across",
        # preference-file writing and batching shared with the RLHF pipeline and the
        # DPO/KTO/reward-model trainers
        "encode"},
}


def _modules(package):
  for info in pkgutil.iter_modules(package.__path__):
    yield info.name, importlib.import_module(f"{package.__name__}.{info.name}")


def _defined_here(module):
  for name, value in vars(module).items():
    if (not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__):
      yield name, value


def _api(package_name):
  """(qualified name, object) of every exported or public-submodule callable."""
  package = importlib.import_module(package_name)
  for name in package.__all__:
    value = getattr(package, name)
    if callable(value):
      yield f"{package_name}.{name}", value
  for module_name, module in _modules(package):
    if not module_name.startswith("_"):
      for name, value in _defined_here(module):
        yield f"{module.__name__}.{name}", value


def _parameters(value):
  target = value
  if inspect.isclass(value):
    if (issubclass(value, (enum.Enum, BaseException)) or typing.Protocol in value.__mro__
        or value.__init__ is object.__init__):
      return []
    target = value.__init__
  try:
    signature = inspect.signature(target)
  except (TypeError, ValueError):
    return []
  return [p for p in signature.parameters if p not in ("self", "cls")]


@pytest.mark.parametrize("package_name", _PACKAGES)
def test_all_is_complete_and_resolves(package_name):
  package = importlib.import_module(package_name)
  assert len(package.__all__) == len(set(package.__all__)), "duplicate names in __all__"
  for name in package.__all__:
    assert hasattr(package, name), f"{package_name}.__all__ names missing {name!r}"
  missing = []
  for module_name, module in _modules(package):
    if module_name.startswith("_"):
      missing += [f"{module.__name__}.{name}" for name, _ in _defined_here(module)
                  if name not in package.__all__
                  and name not in _INTERNAL.get(package_name, set())]
  assert not missing, f"public names not exported from {package_name}: {missing}"


@pytest.mark.parametrize("package_name", _PACKAGES)
def test_every_public_callable_documents_its_arguments(package_name):
  problems = []
  for qualified, value in _api(package_name):
    doc = inspect.getdoc(value) or ""
    auto = dataclasses.is_dataclass(value) and doc.startswith(value.__name__ + "(")
    if not doc or auto:
      problems.append(f"{qualified}: no docstring")
      continue
    if _parameters(value) and "Args:" not in doc and "Attributes:" not in doc:
      problems.append(f"{qualified}: no Args/Attributes section for {_parameters(value)}")
    if inspect.isclass(value):
      for method_name, method in vars(value).items():
        if (not method_name.startswith("_") and inspect.isfunction(method)
            and method.__module__ == value.__module__
            and not inspect.getdoc(getattr(value, method_name))):
          problems.append(f"{qualified}.{method_name}: no docstring")
  assert not problems, "\n".join(problems)


def test_the_check_catches_an_undocumented_function():
  def undocumented(x):
    return x
  assert _parameters(undocumented) == ["x"]
  assert not inspect.getdoc(undocumented)
