"""``gputext doctor --compile``: compile the kernels of every command once, into the kernel cache.

The kernels are specialised by launch geometry, k and metric at run time, so "every kernel" is
what the documented commands compile. The warm-up runs those commands (WARMUP_STEPS), in this
process, on a small synthetic corpus in a temporary folder: the kernels they compile go into
the kernel cache (kernels/jit.py) and every later process loads them instead of compiling. A
command that later runs with other parameters (another k or metric, a corpus size that picks
another geometry) compiles what it still lacks once, on its first run.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# (label, arguments after `gputext`): {d} is the temporary folder, {dev} the device. The corpus
# is sized like a small real one (thousands of documents) so that the commands take the same
# kernel paths and geometries as 20 Newsgroups does.
WARMUP_STEPS = [
    ("corpus synth", "corpus synth --n-docs 6000 --n-terms 20000 --n-classes 8 --seed 1 -o {d}/corpus.h5"),
    ("corpus split", "corpus split {d}/corpus.h5 --test-size 0.25 --seed 1 -o {d}/split"),
    ("knn search cosine k=30", "knn search --index {d}/split/train.h5 --queries {d}/split/test.h5 -k 30 -o {d}/nn.h5"),
    ("knn search cosine k=10", "knn search --index {d}/split/train.h5 --queries {d}/split/test.h5 -k 10 -o {d}/nn10.h5"),
    ("knn search dot", "knn search --index {d}/split/train.h5 --queries {d}/split/test.h5 -k 30 --metric dot -o {d}/nd.h5"),
    ("knn search l2", "knn search --index {d}/split/train.h5 --queries {d}/split/test.h5 -k 30 --metric l2 -o {d}/nl2.h5"),
    ("knn search l1", "knn search --index {d}/split/train.h5 --queries {d}/split/test.h5 -k 30 --metric l1 -o {d}/nl1.h5"),
    ("knn search dense", "knn search --index {d}/split/train.h5 --queries {d}/split/test.h5 -k 30 --method dense -o {d}/ndense.h5"),
    ("knn search exclude-self", "knn search --index {d}/split/train.h5 --exclude-self -k 30 -o {d}/nself.h5"),
    ("knn classify vote", "knn classify --train {d}/split/train.h5 --test {d}/split/test.h5 -k 30 -o {d}/pred.h5"),
    ("knn classify svm meta", "knn classify --train {d}/split/train.h5 --test {d}/split/test.h5 --model svm --features meta"),
    ("knn classify svm both", "knn classify --train {d}/split/train.h5 --test {d}/split/test.h5 --model svm --features both"),
    ("cluster star", "cluster star {d}/split/train.h5 -o {d}/star.h5"),
    ("cluster star update", "cluster star --update {d}/star.h5 --add {d}/split/test.h5 -o {d}/star2.h5"),
    ("cluster stream", "cluster stream {d}/split/train.h5 -o {d}/stream.h5"),
    ("corpus synth ltr", "corpus synth --preset ltr-demo -o {d}/ltr.h5"),
    ("rank train", "rank train {d}/ltr.h5 -o {d}/model.h5"),
    ("rank predict", "rank predict {d}/model.h5 {d}/ltr.h5 -o {d}/scores.h5"),
]
DEVICE_FREE = ("corpus ",)  # steps that take no --device
GPU_ONLY = ("knn search dense",)  # on the CPU, auto never picks the dense method (it scores every document)


@dataclass
class WarmupReport:
    device: str
    folder: str
    steps: list = field(default_factory=list)  # (label, seconds, entries added)
    seconds: float = 0.0
    entries_before: int = 0
    entries_after: int = 0


def cache_entries(folder) -> int:
    """Compiled entries (data files) in a kernel-cache folder."""
    return sum(1 for _ in Path(folder).glob("*.nbc")) if folder else 0


def step_args(template: str, folder: str, device: str) -> list[str]:
    args = template.format(d=folder).split()
    if not template.startswith(DEVICE_FREE):
        args += ["--device", device]
    return args + ["--quiet"]


def compile_all(cli, device: str, on_step=None) -> WarmupReport:
    """Run WARMUP_STEPS through the click group ``cli`` (gputext's, passed in by the doctor command
    that lives in it) on ``device`` ("cpu" or "cuda"); ``on_step(label)`` before each step."""
    from .kernels.jit import cache_folder

    folder = cache_folder()
    report = WarmupReport(device=device, folder=str(folder) if folder else "",
                          entries_before=cache_entries(folder))
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gputext-warmup-") as tmp:
        for label, template in WARMUP_STEPS:
            if device != "cuda" and label in GPU_ONLY:
                continue
            if on_step is not None:
                on_step(label)
            before = cache_entries(folder)
            t = time.perf_counter()
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):  # metrics lines
                cli.main(step_args(template, tmp, device), prog_name="gputext", standalone_mode=False)
            report.steps.append((label, time.perf_counter() - t, cache_entries(folder) - before))
    report.seconds = time.perf_counter() - t_all
    report.entries_after = cache_entries(folder)
    return report
