"""The benchmarks' datasets, made once and cached: every corpus a registry entry reads is built here
with the gputext command line itself (`corpus build` for the real data, `corpus synth` for the
synthetic shapes), as a user would, so the fresh-process timings read the files users have.

    files = datagen.make("20ng", work)       # {"train": ".../train.h5", "test": ".../test.h5"} or None
    datagen.make("synth-20ng", work, scale=0.05)

A dataset that cannot be made here (the real data absent) gives None, and its entries are skipped.
The real datasets are looked up in: the ``datasets`` argument, $GPUTEXT_DATASETS, .data (the copy
carried to the GPU host), ../shared/datasets beside the checkout.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .named import registrar

ROOT = Path(__file__).resolve().parents[1]

# name -> how: a function (folder, scale, the --datasets argument) -> files; its docstring says what it is
DATASETS: dict = {}
dataset = registrar(DATASETS)  # @dataset("name"): register a dataset builder


def real_datasets(arg: str | None = None, name: str = "20newsgroups") -> Path | None:
    """The first folder of real datasets that holds ``name`` (``arg``, $GPUTEXT_DATASETS, .data,
    ../shared/datasets beside the checkout), or None."""
    for cand in (arg, os.environ.get("GPUTEXT_DATASETS"), str(ROOT / ".data"), str(ROOT.parent / "shared" / "datasets")):
        if cand and (Path(cand) / name).is_dir():
            return Path(cand)
    return None


def real_folder(datasets: str | None, name: str) -> Path | None:
    """The folder of real dataset ``name`` (real_datasets), or None when there is none here."""
    found = real_datasets(datasets, name)
    return None if found is None else found / name


def gputext(*args: str) -> None:
    """Run one gputext command (quiet); raise with its stderr when it fails."""
    res = subprocess.run([sys.executable, "-m", "gputext", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"gputext {' '.join(args)} failed: {res.stderr.strip()[-600:]}")


@dataset("20ng")
def _20ng(folder: Path, scale: float, datasets: str | None):
    """20 Newsgroups (bydate, all terms) built by `gputext corpus build`: 11,293 training x 7,528 test
    documents, tf-idf, the test set on the training vocabulary"""
    src = real_folder(datasets, "20newsgroups")
    if src is None:
        return None
    train, test = folder / "train.h5", folder / "test.h5"
    gputext("corpus", "build", str(src / "20newsgroups-train.tab"), "-o", str(train), "-q")
    gputext("corpus", "build", str(src / "20newsgroups-test.tab"), "--vocab-from", str(train), "-o", str(test), "-q")
    return {"train": train, "test": test}


@dataset("letor-sample")
def _letor(folder: Path, scale: float, datasets: str | None):
    """LightGBM's lambdarank sample built by `gputext corpus build --query-groups`: 3,005 rows, 201 queries"""
    src = real_folder(datasets, "letor-sample")
    if src is None:
        return None
    train = folder / "ltr.h5"
    gputext("corpus", "build", str(src / "rank.train"), "--query-groups", str(src / "rank.train.query"), "-o", str(train),
            "-q")
    return {"train": train}


@dataset("synth-20ng")
def _synth_20ng(folder: Path, scale: float, datasets: str | None):
    """synthetic corpus of 20 Newsgroups' shape (`gputext corpus synth`: 11,293 + 7,528 documents, 60,000
    terms, 20 classes; --scale shrinks the documents)"""
    train, test = folder / "train.h5", folder / "test.h5"
    n_train, n_test = max(200, int(11293 * scale)), max(100, int(7528 * scale))
    common = ["--n-terms", str(max(2000, int(60000 * scale))), "--n-classes", "20", "--terms-per-doc", "80"]
    gputext("corpus", "synth", "--n-docs", str(n_train), "--seed", "0", *common, "-o", str(train), "-q")
    gputext("corpus", "synth", "--n-docs", str(n_test), "--seed", "1", *common, "--idf-from", str(train), "-o", str(test),
            "-q")
    return {"train": train, "test": test}


@dataset("synth-ltr")
def _synth_ltr(folder: Path, scale: float, datasets: str | None):
    """synthetic learning-to-rank set (`gputext corpus synth --preset ltr-demo`: about 3,000 rows in 100
    queries, 46 features; --scale shrinks the rows)"""
    train = folder / "ltr.h5"
    gputext("corpus", "synth", "--preset", "ltr-demo", "--n-docs", str(max(300, int(3000 * scale))), "-o", str(train), "-q")
    return {"train": train}


def make(name: str, work: Path, scale: float = 1.0, datasets: str | None = None) -> dict | None:
    """The files of dataset ``name`` under ``work``/<name>-<scale>/ (made on first use, then reused),
    or None when it cannot be made here."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}: {', '.join(sorted(DATASETS))}")
    folder = Path(work) / f"{name}-{scale:g}"
    done = folder / "files.txt"
    if done.exists():
        return {k: Path(v) for k, v in (line.split("\t") for line in done.read_text().splitlines())}
    folder.mkdir(parents=True, exist_ok=True)
    files = DATASETS[name](folder, scale, datasets)
    if files is not None:
        done.write_text("".join(f"{k}\t{v}\n" for k, v in files.items()))
    return files


def describe(name: str) -> str:
    """The one-line description of a dataset (its builder's docstring)."""
    return " ".join(DATASETS[name].__doc__.split())
