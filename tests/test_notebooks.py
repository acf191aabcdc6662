"""The notebooks in notebooks/, executed as a user would run them: each must run to the
end (its cells assert the accuracy they show) within two minutes."""

import pathlib

import pytest

from conftest import require

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_the_notebooks_are_there():
    assert {path.stem for path in NOTEBOOKS} >= {"geometry", "pseudoinverse"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    require("opencl")  # without a GPU the notebooks run the kernels on OpenCL, as CI must
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    first = "".join(output.get("text", "") for output in notebook.cells[1].outputs)
    assert first.startswith("device: ") and "opencl" in first, first
