"""The notebooks in colabs/ run headless from a fresh kernel and assert their key result.

Each notebook runs top to bottom with nbclient in its own kernel (cwd: a temp dir, the checkout on
PYTHONPATH, so its install cell finds rlagents importable and installs nothing); its last code cell
asserts the notebook's key result. A notebook added to colabs/ is picked up here; add it to
`_SLOW` if it runs over a minute. Committed notebooks carry no outputs.
"""

import glob
import os

import nbformat
import pytest

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_NOTEBOOKS = sorted(glob.glob(os.path.join(_ROOT, "colabs", "*.ipynb")))
# Notebooks over a minute on a loaded 2-core CPU are marked slow.
_SLOW = {"quickstart.ipynb", "custom_task.ipynb", "world_model.ipynb", "selfplay.ipynb"}


def _params():
  for path in _NOTEBOOKS:
    name = os.path.basename(path)
    marks = [pytest.mark.slow] if name in _SLOW else []
    yield pytest.param(path, id=name, marks=marks)


def test_every_expected_notebook_exists():
  names = {os.path.basename(p) for p in _NOTEBOOKS}
  assert {"quickstart.ipynb", "losses.ipynb", "custom_task.ipynb"} <= names


@pytest.mark.parametrize("path", _NOTEBOOKS, ids=os.path.basename)
def test_notebook_is_committed_without_outputs(path):
  notebook = nbformat.read(path, as_version=4)
  nbformat.validate(notebook)
  for index, cell in enumerate(notebook.cells):
    if cell.cell_type == "code":
      assert not cell.outputs, f"{os.path.basename(path)} cell {index} has outputs: strip them"
      assert cell.execution_count is None, f"{os.path.basename(path)} cell {index}"


@pytest.mark.parametrize("path", list(_params()))
def test_notebook_runs_and_asserts_its_result(path, tmp_path, monkeypatch):
  from nbclient import NotebookClient  # pylint: disable=g-import-not-at-top
  notebook = nbformat.read(path, as_version=4)
  code = [c for c in notebook.cells if c.cell_type == "code"]
  assert "import rlagents" in code[0].source, "the first code cell installs/imports rlagents"
  assert "assert" in code[-1].source, "the last code cell asserts the notebook's key result"
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
      [_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
  monkeypatch.setenv("MPLBACKEND", "Agg")
  client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                          resources={"metadata": {"path": str(tmp_path)}})
  # Raises CellExecutionError naming the cell and its traceback if any cell (the final assertion
  # included) fails.
  client.execute()
