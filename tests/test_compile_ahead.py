"""gputext.compile_ahead: the helpers that compile a GPU command's fixed-signature functions beside
it on an empty kernel cache. Its signatures must be the ones the command's calls make: after the
CPU helper, a GPU search (in the simulator, which runs the same host functions) compiles none of
them. The command line starts the helper itself and later commands start none."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from procs import ROOT, child_env
from test_kernel_cache import MODULE

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"),
                                reason="sets the simulator for its own processes; once is enough")

# each numba function a command compiles (a cache miss): "compiled <name> <repr of its argument types>" on stderr
PROBE = textwrap.dedent('''
    import sys
    from numba.core.dispatcher import Dispatcher
    original = Dispatcher.compile
    def compile(self, sig):
        misses = sum(self._cache_misses.values())
        try:
            return original(self, sig)
        finally:
            if sum(self._cache_misses.values()) > misses:
                print("compiled", self.py_func.__name__, repr(tuple(sig)), file=sys.stderr)
    Dispatcher.compile = compile
    from gputext.engine import Index
    from gputext.engine.search import Geometry, search_topk
    from gputext.io import read_corpus
    index = Index.from_corpus(read_corpus(sys.argv[1]))
    # tiles of 4 queries: the host tiles them in parallel (tile_inputs) as a search of many queries does
    search_topk(index, read_corpus(sys.argv[2]).X, 5, device="cuda", geometry=Geometry(tile_rows=4))
''')


def _env(cache, **extra):
    return child_env(ROOT, GPUTEXT_CACHE_DIR=str(cache), NUMBA_ENABLE_CUDASIM="1", **extra)


def _gputext(args, env, cwd):
    done = subprocess.run([sys.executable, "-m", "gputext", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("ahead")
    env = _env(d / "setup-cache", GPUTEXT_AHEAD="0")
    _gputext(["corpus", "synth", "--n-docs", "60", "--n-terms", "200", "--n-classes", "3", "--seed", "2", "-q",
              "-o", str(d / "c.h5")], env, d)
    _gputext(["corpus", "split", str(d / "c.h5"), "--test-size", "0.2", "--seed", "1", "-q", "-o", str(d / "s")],
             env, d)
    return d



def test_the_cpu_helpers_signatures_are_the_ones_a_gpu_search_compiles(corpus, tmp_path):
    """A GPU search on an empty cache (the simulator runs the GPU path's host functions) compiles each
    AHEAD["cpu"] function for exactly the argument types the helper compiles it for: the same
    cache key, so after the helper the search loads it."""
    from numba.core import sigutils

    from gputext.compile_ahead import AHEAD

    run = subprocess.run([sys.executable, "-c", PROBE, "s/train.h5", "s/test.h5"],
                         env=_env(tmp_path / "cache", GPUTEXT_AHEAD="0"), cwd=corpus, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    compiled = {tuple(line.split(" ", 2)[1:]) for line in run.stderr.splitlines() if line.startswith("compiled ")}
    for _, name, args in AHEAD["cpu"]:
        types, _ = sigutils.normalize_signature(f"({args},)")
        assert (name, repr(tuple(types))) in compiled, (name, sorted(c for c in compiled if c[0] == name))


def test_the_helper_fills_the_cache_and_later_commands_start_none(corpus, tmp_path):
    """`python -m gputext.compile_ahead cpu` compiles every entry and leaves its marker; a GPU
    command line starts the helper itself (here one that then fails on a missing file: the helper
    starts before the command's work), and one after the marker starts none."""
    from gputext.compile_ahead import AHEAD

    cache = tmp_path / "cache"
    env = _env(cache, GPUTEXT_AHEAD="1")
    failing = ["knn", "search", "--index", "missing.h5", "--queries", "missing.h5", "--device", "cuda", "-q"]
    done = subprocess.run([sys.executable, "-m", "gputext", *failing], env=env, cwd=corpus, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-2000:]
    deadline = time.monotonic() + 300
    while not list(cache.glob("*/ahead-cpu.done")) and time.monotonic() < deadline:
        time.sleep(0.2)
    folder = [p.parent for p in cache.glob("*/ahead-cpu.done")]
    assert folder, "the helper did not finish"
    indexes = {p.name.split("-")[0].split(".")[-1] for p in folder[0].glob("*.nbi")}  # module.function-line.pyXY.nbi
    assert {name for _, name, _ in AHEAD["cpu"]} <= indexes
    code = "import sys; from gputext.compile_ahead import targets_needed; print(targets_needed(sys.argv[1:]))"
    later = subprocess.run([sys.executable, "-c", code, *failing], env=env, cwd=corpus, capture_output=True,
                           text=True, timeout=300)
    assert later.stdout.strip() == "[]", later.stderr[-2000:]


def test_which_commands_start_helpers(monkeypatch, tmp_path):
    from gputext import compile_ahead

    monkeypatch.setattr("gputext.kernels.jit.cache_folder", lambda: tmp_path)
    monkeypatch.setenv(compile_ahead.ENV, "1")
    monkeypatch.setattr("gputext.backend.simulator_enabled", lambda: True)
    assert compile_ahead.targets_needed(["knn", "search", "--index", "a.h5"]) == ["cpu"]
    assert compile_ahead.targets_needed(["knn", "classify", "--device", "cpu"]) == []
    assert compile_ahead.targets_needed(["knn", "search", "--device=cpu"]) == []
    assert compile_ahead.targets_needed(["cluster", "star", "a.h5"]) == []
    assert compile_ahead.targets_needed(["knn", "search", "--help"]) == []
    held = compile_ahead._hold(tmp_path, "cpu")  # a helper is at work
    assert held is not None and compile_ahead._hold(tmp_path, "cpu") is None
    assert compile_ahead.targets_needed(["knn", "search"]) == []
    os.close(held)
    assert compile_ahead.targets_needed(["knn", "search"]) == ["cpu"]
    (tmp_path / "ahead-cpu.done").touch()  # a helper has finished
    assert compile_ahead.targets_needed(["knn", "search"]) == []
    (tmp_path / "ahead-cpu.done").unlink()
    monkeypatch.setenv(compile_ahead.ENV, "0")
    assert compile_ahead.targets_needed(["knn", "search"]) == []


# test_kernel_cache's factory of closures, made by kernel_cache (it names the call that made each kernel)
FACTORY = MODULE.replace("import functools\n", "from gputext.kernels._factory import kernel_cache\n").replace(
    "@functools.lru_cache(maxsize=None)", "@kernel_cache")


def test_a_submitted_kernel_is_compiled_by_the_helper_and_loaded_by_the_command(tmp_path):
    """submit() names a factory's kernel and its launch's argument types on the helper's stdin; the
    helper (serve_requests) makes the same kernel and compiles it into the cache; the command's
    own call then loads it (the same key), compiling nothing."""
    import io

    from gputext import compile_ahead

    (tmp_path / "factmod.py").write_text(FACTORY)
    sys.path.insert(0, str(tmp_path))
    try:
        import factmod
        pipe = io.BytesIO()
        compile_ahead._requests["pipes"].append(pipe)
        compile_ahead.submit(factmod.make(3), (1.0,))
    finally:
        compile_ahead._requests["pipes"].clear()
        sys.path.remove(str(tmp_path))
    assert factmod.make(3).gputext_factory == ("factmod", "make", (3,), ())
    env = child_env(ROOT, str(tmp_path), GPUTEXT_CACHE_DIR=str(tmp_path / "cache"))
    helper = subprocess.run([sys.executable, "-c", "import sys; from gputext.compile_ahead import serve_requests; "
                             "sys.exit(serve_requests(sys.stdin.fileno()))"], input=pipe.getvalue(), env=env,
                            cwd=tmp_path, capture_output=True, timeout=300)
    assert helper.returncode == 0, helper.stderr[-2000:]
    command = subprocess.run([sys.executable, "-c", "import factmod; f = factmod.make(3); assert f(1.0) == 4.0; "
                              "print(sum(f.stats.cache_hits.values()), sum(f.stats.cache_misses.values()))"],
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert command.returncode == 0, command.stderr[-2000:]
    assert command.stdout.split() == ["1", "0"]  # loaded, nothing compiled


def test_doctor_says_what_the_helpers_did(tmp_path):
    """gputext doctor's "helpers" line: off with GPUTEXT_AHEAD=0, else each target's state."""
    for ahead, want in (("0", "off (GPUTEXT_AHEAD=0)"), ("1", "cpu to start, cuda to start")):
        done = _gputext(["doctor"], child_env(ROOT, GPUTEXT_CACHE_DIR=str(tmp_path / "c"), GPUTEXT_AHEAD=ahead),
                        tmp_path)
        line = next(x for x in done.stdout.splitlines() if x.startswith("helpers"))
        assert want in line, line


def test_a_device_helper_stops_when_no_request_comes():
    """A helper whose command stays alive (the warm server's resident keeps the pipe open) stops
    serving after its idle time instead of holding its GPU context for good."""
    from gputext.compile_ahead import serve_requests

    read_end, write_end = os.pipe()
    try:
        t0 = time.monotonic()
        assert serve_requests(read_end, idle_s=0.3) == 0
        assert time.monotonic() - t0 < 5
    finally:
        os.close(write_end)
        os.close(read_end)
