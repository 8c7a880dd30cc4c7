"""gputext.compile_ahead: the helpers that compile a command's manifest beside it on an empty kernel
cache. A manifest's entries must be the ones the command's calls make: after its helpers, the
recorded command compiles nothing; the GPU search's host functions have the keys a GPU search (in
the simulator, which runs the same host functions) makes. The command line starts the helpers
itself and later commands start none."""
from __future__ import annotations

import json
import os
import shlex
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



def _requests_of(name: str) -> list[tuple]:
    """(function name, repr of argument types) of each CPU entry of the package's manifest ``name``."""
    from gputext.compile_ahead import _requested, entries, manifest

    found = manifest(name)
    assert found is not None, f"no manifest {name}"
    out = []
    for e in entries(found):
        if e["target"] == "cpu":
            dispatcher, argtypes = _requested(e["request"].encode())
            out.append((dispatcher.py_func.__name__, repr(tuple(argtypes))))
    return out


def test_the_gpu_search_manifests_host_functions_are_the_ones_a_gpu_search_compiles(corpus, tmp_path):
    """A GPU search on an empty cache (the simulator runs the GPU path's host functions) compiles
    each host function of knn-search.cuda's manifest (recorded on the GPU host) that it calls
    for exactly the argument types the manifest holds: the same cache key, so after the helpers
    the search loads it; and it calls most of them."""
    run = subprocess.run([sys.executable, "-c", PROBE, "s/train.h5", "s/test.h5"],
                         env=_env(tmp_path / "cache", GPUTEXT_AHEAD="0"), cwd=corpus, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    compiled = {tuple(line.split(" ", 2)[1:]) for line in run.stderr.splitlines() if line.startswith("compiled ")}
    wanted = _requests_of("knn-search.cuda")
    names = {n for n, _ in compiled}
    for name, types in wanted:
        if name in names:
            assert (name, types) in compiled, (name, types, sorted(c for c in compiled if c[0] == name))
    assert len({n for n, _ in wanted} & names) >= 3, (wanted, compiled)


def test_every_manifest_entry_names_a_function_this_code_makes():
    """Each entry of every manifest in the package decodes to a numba function of this code (its
    module imports, its factory makes it) with argument types: a renamed function or factory
    shows here, not as a helper that silently compiles nothing."""
    from gputext.compile_ahead import _requested, command_name, manifests

    names = sorted(p.stem for p in manifests().glob("*.json"))
    assert {n.split(".")[0] for n in names} == {"knn-search", "knn-classify-svm", "knn-classify-vote", "star",
                                                "stream", "rank-train"}
    assert {n.split(".")[1] for n in names} == {"cpu", "cuda"}
    for name in names:
        found = json.loads((manifests() / f"{name}.json").read_text())
        assert found["recorded"]["device"] and found["recorded"]["date"] and found["recorded"]["commit"]
        assert command_name(shlex.split(found["recorded"]["command"])[1:]) == name.split(".")[0]
        for e in found["entries"]:
            assert e["request"], (name, e["name"])
            dispatcher, argtypes = _requested(e["request"].encode())
            assert dispatcher.py_func.__qualname__ == e["name"] and isinstance(argtypes, tuple), (name, e["name"])


def test_a_recorded_command_compiles_nothing_after_its_helpers(corpus, tmp_path):
    """The whole loop on the CPU: a command recorded on an empty cache (GPUTEXT_AHEAD_RECORD) gives
    its manifest; on another empty cache the command line itself starts the helpers of that
    manifest (GPUTEXT_AHEAD_MANIFESTS: a folder of one's own recordings), which leave their
    markers; the same command then compiles nothing, and later command lines start none."""
    from gputext.compile_ahead import needed

    argv = ["knn", "search", "--index", "s/train.h5", "--queries", "s/test.h5", "-k", "5", "--device", "cpu", "-q",
            "-o", "out.h5"]
    record = tmp_path / "record.jsonl"
    _gputext(argv, _env(tmp_path / "first", GPUTEXT_AHEAD="0", GPUTEXT_AHEAD_RECORD=str(record)), corpus)
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    assert lines and all(e["request"] and e["target"] == "cpu" and e["seconds"] > 0 for e in lines)
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "knn-search.cpu.json").write_text(json.dumps({"recorded": {}, "entries": lines}))
    cache = tmp_path / "second"
    env = _env(cache, GPUTEXT_AHEAD="1", GPUTEXT_AHEAD_MANIFESTS=str(folder))
    _gputext(argv, env, corpus)  # starts the helpers (one part on a 2-core machine: more on more cores)
    deadline = time.monotonic() + 300
    while not list(cache.glob("*/ahead-knn-search.cpu-*.done")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(cache.glob("*/ahead-knn-search.cpu-*.done")), "the helpers did not finish"
    from benchmarks.fresh import wait_for_compile_helpers
    wait_for_compile_helpers(str(cache))
    again = tmp_path / "again.jsonl"
    _gputext(argv, dict(env, GPUTEXT_AHEAD="0", GPUTEXT_AHEAD_RECORD=str(again)), corpus)
    assert not again.exists() or again.read_text() == "", again.read_text()
    code = "import sys; from gputext.compile_ahead import needed; print(needed(sys.argv[1:])[1])"
    later = subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd=corpus, capture_output=True, text=True,
                           timeout=300)
    assert later.stdout.strip() == "[]", later.stderr[-2000:]


def test_which_commands_start_helpers(monkeypatch, tmp_path):
    from gputext import compile_ahead

    assert compile_ahead.command_name(["knn", "search", "--index", "a.h5"]) == "knn-search"
    assert compile_ahead.command_name(["knn", "classify", "--model", "svm"]) == "knn-classify-svm"
    assert compile_ahead.command_name(["knn", "classify", "--model=svm"]) == "knn-classify-svm"
    assert compile_ahead.command_name(["knn", "classify", "-k", "30"]) == "knn-classify-vote"
    assert compile_ahead.command_name(["cluster", "star", "a.h5"]) == "star"
    assert compile_ahead.command_name(["rank", "train", "a.h5"]) == "rank-train"
    assert compile_ahead.command_name(["corpus", "build", "a.tab"]) is None
    monkeypatch.setattr("gputext.kernels.jit.cache_folder", lambda: tmp_path)
    monkeypatch.setenv(compile_ahead.ENV, "1")
    monkeypatch.setattr("gputext.backend.simulator_enabled", lambda: False)
    monkeypatch.setattr("gputext.backend.driver_library_present", lambda: True)
    monkeypatch.setattr(compile_ahead, "helpers", lambda seconds, cpus=None: 2)
    assert compile_ahead.needed(["knn", "search", "--index", "a.h5"]) == ("knn-search.cuda", [0, 1], 2)
    assert compile_ahead.needed(["knn", "search", "--device=cpu"]) == ("knn-search.cpu", [0, 1], 2)
    assert compile_ahead.needed(["knn", "classify", "--device", "cpu"]) == ("knn-classify-vote.cpu", [0, 1], 2)
    assert compile_ahead.needed(["corpus", "build", "a.tab"])[1] == []
    assert compile_ahead.needed(["knn", "search", "--help"])[1] == []
    monkeypatch.setattr("gputext.backend.driver_library_present", lambda: False)  # no GPU: the CPU's manifest
    assert compile_ahead.needed(["knn", "search"])[0] == "knn-search.cpu"
    held = compile_ahead._hold(tmp_path, "ahead-knn-search.cpu-0of2")  # a helper is at work
    assert held is not None and compile_ahead._hold(tmp_path, "ahead-knn-search.cpu-0of2") is None
    assert compile_ahead.needed(["knn", "search"])[1] == [1]
    os.close(held)
    (tmp_path / "ahead-knn-search.cpu-1of2.done").touch()  # a helper has finished
    assert compile_ahead.needed(["knn", "search"])[1] == [0]
    monkeypatch.setenv(compile_ahead.ENV, "0")
    assert compile_ahead.needed(["knn", "search"])[1] == []


def test_helpers_and_their_shares():
    """One helper per 3 s of compiling, at most 6 and one fewer than the CPUs; each entry to exactly
    one helper, the longest first, the helpers' seconds within the longest entry of each other."""
    from gputext.compile_ahead import helpers, plan

    assert helpers(0.5, cpus=16) == 1 and helpers(7.0, cpus=16) == 3 and helpers(60.0, cpus=16) == 6
    assert helpers(60.0, cpus=2) == 1 and helpers(60.0, cpus=1) == 0
    items = [{"seconds": s} for s in (0.1, 3.0, 0.2, 1.0, 2.5, 0.4, 0.3, 1.2)]
    parts = plan(items, 3)
    assert sorted(i for p in parts for i in p) == list(range(len(items)))
    assert [p[0] for p in parts] == [1, 4, 7]  # the three longest start first
    loads = [sum(items[i]["seconds"] for i in p) for p in parts]
    assert max(loads) - min(loads) <= 3.0
    assert all([items[i]["seconds"] for i in p] == sorted((items[i]["seconds"] for i in p), reverse=True)
               for p in parts)


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
    """gputext doctor's "helpers" line: off with GPUTEXT_AHEAD=0, else on, with the manifests known."""
    for ahead, want in (("0", "off (GPUTEXT_AHEAD=0)"), ("1", "(12 manifests); done here: none")):
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
