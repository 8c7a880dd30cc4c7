"""Every `gputext ...` command line of README.md and docs/*.md runs, as written, on small fixtures.

The lines are those of the docs' fenced code blocks that start with `gputext ` or pipe into one.
Each doc runs in a workspace of its own, in the order of its lines (later lines read what earlier
ones wrote), after copying in the fixtures (FIXTURES: the files the docs name, small) and running
its SETUP lines. A line must exit 0, and every HDF5 file it names after -o / --train-output /
--state must open, and pass `gputext corpus validate` where it is a corpus file.

A line that cannot run here is marked in the doc itself, with an HTML comment before its code
block (invisible on the rendered page)::

    <!-- not-in-ci: "FRAGMENT" why -->

which skips the block's lines containing FRAGMENT; a marker that matches no line fails the test.
Lines with shell syntax (a pipe, a redirection) run through bash with the checkout's `gputext`
first on $PATH; the others run in this process (CliRunner), which keeps the test fast.

GPUTEXT_DOC_DEVICE=cuda (or cpu) appends `--device cuda` to every command that has --device;
``test_documented_command_lines_on_the_gpu`` (marker gpu, `make test-gpu`) does so itself.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from gputext.cli import cli
from procs import child_env

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
MARKER = re.compile(r'<!--\s*not-in-ci:\s*"([^"]+)"\s*(.*?)\s*-->')
GROUPS = ("corpus", "knn", "cluster", "rank", "doctor")
SHELL = re.compile(r"[|<>;&]")
OUTPUT_OPTIONS = ("-o", "--output", "--train-output", "--state")

# per doc: lines run before its own (files its lines read but no line writes)
SETUP = {
    "rank.md": ["gputext corpus synth --preset ltr-demo --seed 3 -o ltr-b.h5 && gputext corpus split ltr-b.h5 -o b "
                "&& cp b/train.h5 train.h5 && cp b/test.h5 valid.h5"],
    "star.md": ["gputext cluster star corpus.h5 --beta 0.25 -o clusters_gpu.h5 --quiet",
                "gputext cluster star corpus.h5 --beta 0.25 -o clusters_cpu.h5 --quiet",
                "gputext cluster stream corpus.h5 -o stream.h5 --quiet"],
    "stream.md": ["gputext cluster stream - --idf-from ref.h5 --state state.h5 < feed.jsonl > /dev/null"],
}

WORDS = {"sport": "match goal team keeper striker score league cup win coach",
         "politics": "senate vote bill budget tax parliament minister law election party",
         "science": "atom cell gene energy physics theory lab experiment data quantum"}


def _texts(n: int, seed: int):
    rng = np.random.default_rng(seed)
    labels = list(WORDS)
    for i in range(n):
        label = labels[i % len(labels)]
        words = rng.choice(WORDS[label].split() + WORDS[labels[(i + 1) % 3]].split()[:3], 8)
        yield label, " ".join(words)


def _tab(path: Path, n: int, seed: int) -> None:
    path.write_text("label\ttext\nd\tstring\nclass\t\n" + "".join(f"{a}\t{t}\n" for a, t in _texts(n, seed)))


def _jsonl(path: Path, n: int, seed: int, prefix: str) -> None:
    import json
    path.write_text("".join(json.dumps({"id": f"{prefix}{i}", "text": t, "label": a}) + "\n"
                            for i, (a, t) in enumerate(_texts(n, seed))))


def build_fixtures(root: Path) -> None:
    """The input files the docs name, small (a few dozen documents)."""
    for name, n, seed in (("20ng-train.tab", 45, 0), ("20ng-test.tab", 15, 1)):
        _tab(root / name, n, seed)
        shutil.copyfile(root / name, root / name.replace("20ng", "20newsgroups"))
    for name, n, seed in (("docs.jsonl", 20, 2), ("new.jsonl", 10, 3), ("news.jsonl", 30, 4), ("more.jsonl", 10, 5),
                          ("feed.jsonl", 15, 6)):
        _jsonl(root / name, n, seed, name.split(".")[0])
    for i, (label, text) in enumerate(_texts(18, 7)):
        folder = root / "news" / label
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}.txt").write_text(text)
    rng = np.random.default_rng(8)
    (root / "rank.train").write_text("".join(f"{rng.integers(0, 3)} " + " ".join(f"{j + 1}:{rng.random():.3f}" for j in range(5))
                                             + "\n" for _ in range(24)))
    (root / "rank.train.query").write_text("8\n8\n8\n")
    X = sp.random(20, 30, density=0.2, random_state=9, format="csr", dtype=np.float32)
    sp.save_npz(root / "X.npz", X)
    (root / "X.labels.txt").write_text("".join(f"{'ab'[i % 2]}\n" for i in range(20)))
    run = CliRunner().invoke
    for argv in (["corpus", "build", "20ng-train.tab", "-o", "train.h5"],
                 ["corpus", "build", "20ng-test.tab", "--vocab-from", "train.h5", "-o", "test.h5"],
                 ["corpus", "build", "20ng-train.tab", "20ng-test.tab", "--vocab-from", "train.h5", "-o", "corpus_all.h5"],
                 ["knn", "classify", "--train", "train.h5", "--test", "test.h5", "-k", "3", "-o", "pred.h5", "--device",
                  "cpu"]):
        result = _in(root, run, argv + ["--quiet"] if argv[0] != "knn" else argv)
        assert result.exit_code == 0, result.output
    for copy, of in (("corpus.h5", "train.h5"), ("new.h5", "test.h5"), ("ref.h5", "train.h5")):
        shutil.copyfile(root / of, root / copy)


def _in(root: Path, run, argv):
    old = os.getcwd()
    os.chdir(root)
    try:
        return run(cli, argv)
    finally:
        os.chdir(old)


def command_lines(doc: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """(the doc's command lines in order, its not-in-ci markers as (fragment, why))."""
    lines, markers, fence = [], [], False
    for line in doc.read_text().splitlines():
        markers += MARKER.findall(line)
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        text = line.strip()
        if fence and re.search(r"(^|\|\s*)gputext (%s)\b" % "|".join(GROUPS), text):
            lines.append(text)
    return lines, markers


def _takes_device(argv: list[str]) -> bool:
    ctx = cli.make_context("gputext", list(argv[:2]), resilient_parsing=True)
    group = cli.get_command(ctx, argv[0])
    command = group.get_command(ctx, argv[1]) if group is not None and hasattr(group, "get_command") else group
    return command is not None and any("--device" in p.opts for p in command.params)


def with_device(line: str, device: str | None) -> str:
    """``line`` with --device DEVICE after each gputext command that takes it (and has none)."""
    if not device:
        return line
    parts = re.split(r"(\s*[|<>]\s*)", line)
    out = []
    for part in parts:
        words = part.split()
        if words[:1] == ["gputext"] and len(words) >= 2 and "--device" not in words:
            argv = [w for w in shlex.split(part.split("#")[0])[1:]]
            if _takes_device(argv):
                part = part.split("#")[0].rstrip() + f" --device {device}"
        out.append(part)
    return "".join(out)


def outputs(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in OUTPUT_OPTIONS and argv[i + 1] != "-"]


def check_output(root: Path, name: str) -> None:
    path = root / name
    assert path.exists(), f"{name} was not written"
    files = sorted(path.rglob("*.h5")) if path.is_dir() else [path] if name.endswith(".h5") else []
    if not path.is_dir() and not files:
        assert path.stat().st_size > 0, f"{name} is empty"
    for f in files:
        with h5py.File(f, "r") as h:
            kind = h.attrs.get("gputext-format")
        if kind == "corpus":
            result = _in(root, CliRunner().invoke, ["corpus", "validate", str(f)])
            assert result.exit_code == 0, result.output


def gputext_shim(root: Path) -> Path:
    """A folder whose `gputext` runs this Python's gputext (the checkout first, through child_env's
    PYTHONPATH): a checkout run without an installed script (the GPU host) runs the lines too."""
    folder = root / ".bin"
    script = folder / "gputext"
    if not script.exists():
        folder.mkdir(exist_ok=True)
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gputext "$@"\n')
        script.chmod(0o755)
    return folder


def run_line(root: Path, line: str, device: str | None) -> None:
    line = with_device(line, device)
    if SHELL.search(line.split("#")[0]):
        env = child_env(PATH=str(gputext_shim(root)) + os.pathsep + os.environ.get("PATH", ""))
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=root, env=env, capture_output=True,
                              timeout=300)
        assert proc.returncode == 0, (line, proc.stderr.decode(errors="replace")[-2000:])
        argv = shlex.split(line, comments=True)
    else:
        argv = shlex.split(line, comments=True)[1:]
        result = _in(root, CliRunner().invoke, argv)
        assert result.exit_code == 0, (line, result.output[-2000:])
    for name in outputs(argv):
        check_output(root, name)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("doc_fixtures")
    build_fixtures(root)
    return root


def run_doc(doc: Path, fixtures: Path, work: Path, device: str | None) -> None:
    lines, markers = command_lines(doc)
    shutil.copytree(fixtures, work)
    for line in SETUP.get(doc.name, []):
        run_line(work, line, None)
    skipped = {fragment: 0 for fragment, _ in markers}
    for line in lines:
        hits = [f for f in skipped if f in line]
        for f in hits:
            skipped[f] += 1
        if not hits:
            run_line(work, line, device)
    assert all(skipped.values()), f"{doc.name}: not-in-ci markers that match no command line: " \
                                  f"{[f for f, n in skipped.items() if not n]}"


DOC_IDS = [d.name for d in DOCS if command_lines(d)[0]]


@pytest.mark.parametrize("name", DOC_IDS)
def test_documented_command_lines_run(name, fixtures, tmp_path):
    """Every command line of the doc exits 0 and writes valid files (module docstring)."""
    run_doc(next(d for d in DOCS if d.name == name), fixtures, tmp_path / "work",
            os.environ.get("GPUTEXT_DOC_DEVICE") or None)


@pytest.mark.gpu
@pytest.mark.parametrize("name", DOC_IDS)
def test_documented_command_lines_on_the_gpu(name, fixtures, tmp_path):
    """The same lines with --device cuda on every command that computes (the GPU host)."""
    run_doc(next(d for d in DOCS if d.name == name), fixtures, tmp_path / "work", "cuda")
