"""``gputext doctor --compile``: compile the kernels of every command once, into the kernel cache.

The kernels are specialised by launch geometry, k and metric at run time, so "every kernel" is
what the documented commands compile. The warm-up runs those commands (WARMUP_STEPS), in this
process, on a small synthetic corpus in a temporary folder: the kernels they compile go into
the kernel cache (kernels/jit.py) and every later process loads them instead of compiling. A
command that later runs with other parameters (another k or metric, a corpus size that picks
another geometry) compiles what it still lacks once, on its first run.

With ``jobs`` > 1 the steps after the corpora (SETUP) run as separate ``gputext`` processes, that
many jobs at once: compiling holds Python's lock, so only processes compile side by side, and the
kernel cache is safe for processes that fill it together. A job is a step and the steps that
FOLLOW it (they read its output, or launch the kernels it compiles and would compile them again
if they ran beside it), one after another. Each process pays its imports (and the GPU's context).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import GputextError

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
SETUP = ("corpus synth", "corpus split", "corpus synth ltr")  # the corpora every other step reads
FOLLOW = {"knn search cosine k=30": ("knn search cosine k=10", "knn search dot", "knn search l2", "knn search l1",
                                     "knn search dense", "knn search exclude-self", "knn classify vote"),
          "knn classify svm meta": ("knn classify svm both",), "cluster star": ("cluster star update",),
          "rank train": ("rank predict",)}
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


def compile_all(cli, device: str, on_step=None, jobs: int = 1) -> WarmupReport:
    """Run WARMUP_STEPS through the click group ``cli`` (gputext's, passed in by the doctor command
    that lives in it) on ``device`` ("cpu" or "cuda"); ``on_step(label)`` as each step starts (in
    this process) or ends (in a job's process). ``jobs`` > 1: the steps after SETUP in that many
    processes at once; a step's entries added are then None (the processes share the cache)."""
    from .kernels.jit import cache_folder

    folder = cache_folder()
    report = WarmupReport(device=device, folder=str(folder) if folder else "",
                          entries_before=cache_entries(folder))
    t_all = time.perf_counter()
    steps = [(label, template) for label, template in WARMUP_STEPS if device == "cuda" or label not in GPU_ONLY]
    with tempfile.TemporaryDirectory(prefix="gputext-warmup-") as tmp:
        for label, template in steps:
            if jobs > 1 and label not in SETUP:
                continue
            if on_step is not None:
                on_step(label)
            before = cache_entries(folder)
            t = time.perf_counter()
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):  # metrics lines
                cli.main(step_args(template, tmp, device), prog_name="gputext", standalone_mode=False)
            report.steps.append((label, time.perf_counter() - t, cache_entries(folder) - before))
        if jobs > 1:
            _run_jobs([(label, t) for label, t in steps if label not in SETUP], tmp, device, jobs, report, on_step)
    report.seconds = time.perf_counter() - t_all
    report.entries_after = cache_entries(folder)
    return report


def _run_jobs(steps, folder: str, device: str, jobs: int, report: WarmupReport, on_step) -> None:
    """``steps`` as `python -m gputext` processes in jobs (a step and those that FOLLOW it), ``jobs``
    at once; each step's (label, seconds, None) into the report in the order they end. A failed
    step: GputextError (one line, exit code 2) with its last line of output."""
    import subprocess
    import sys
    import threading
    from concurrent.futures import ThreadPoolExecutor

    templates = dict(steps)
    followers = {label for group in FOLLOW.values() for label in group}
    chains = [[label] + [f for f in FOLLOW.get(label, ()) if f in templates] for label, _ in steps
              if label not in followers]
    chains.sort(key=len, reverse=True)  # the jobs of most steps first
    # each step its own process, not the warm server's; no compile helpers beside the steps (they
    # compile the same functions as the steps themselves)
    env = dict(os.environ, GPUTEXT_DAEMON="0", GPUTEXT_AHEAD="0")
    lock = threading.Lock()

    def run(chain):
        for label in chain:
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "gputext", *step_args(templates[label], folder, device)],
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise GputextError(f"warm-up step {label!r} exited with {done.returncode}: {last}")
            with lock:
                report.steps.append((label, time.perf_counter() - t, None))
                if on_step is not None:
                    on_step(label)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in [pool.submit(run, chain) for chain in chains]:
            future.result()
