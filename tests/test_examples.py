"""Every script in examples/ runs on its small built-in input (in this process, so numba's compiled
functions are shared with the other tests), and the Python blocks of README.md and docs/python.md run.
(The README's results tables are checked against benchmarks/records/ by tests/test_benchmarks.py.)"""
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_there_are_three_to_five_examples():
    assert 3 <= len(EXAMPLES) <= 5, [p.name for p in EXAMPLES]


@pytest.mark.filterwarnings("error::sklearn.exceptions.FitFailedWarning")  # a grid whose fits fail is a broken example
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path, tmp_path, monkeypatch, capsys):
    args = ["--device", "cpu"] + (["--out", str(tmp_path / "plot.png")] if "plot" in path.name else [])
    monkeypatch.setattr(sys, "argv", [str(path)] + args)
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert out.strip()
    if "plot" in path.name:
        assert (tmp_path / "plot.png").stat().st_size > 10_000
    if path.name == "near_duplicates.py":
        assert "12 near-duplicate pairs, 12 groups" in out  # exactly the planted copies
    if path.name == "pipeline_grid_search.py":
        assert "test accuracy (micro-F1): 1.000" in out


def python_blocks(path: Path) -> list[str]:
    import re
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


@pytest.mark.parametrize("index", range(len(python_blocks(ROOT / "docs" / "python.md"))))
def test_docs_python_md_examples_run(index, tmp_path, monkeypatch):
    block = python_blocks(ROOT / "docs" / "python.md")[index]
    if "anndata" in block:  # the AnnData block writes its own train.h5 and needs the optional anndata
        pytest.importorskip("anndata")
    if "pd.DataFrame" in block:
        pytest.importorskip("pandas")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, f"docs/python.md block {index}", "exec"), {"__name__": "__docs__"})


def test_readme_python_example_runs(monkeypatch, tmp_path, capsys):
    (block,) = python_blocks(ROOT / "README.md")[:1]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md python example", "exec"), {"__name__": "__readme__"})
    assert "sport" in capsys.readouterr().out
