"""The kernel cache (kernels/jit.py): a second process loads what the first compiled and compiles
nothing, a changed key compiles afresh, and two processes filling one cache at once leave every
entry whole. CPU twins run here; the device path is checked as far as it goes without a GPU (the
cache object each kernel gets, and where it points)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from procs import ROOT, child_env

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"),
                                reason="the simulator compiles nothing")

# A factory of closures, like the kernels' geometry factories: one cache index, one entry per constant.
MODULE = textwrap.dedent('''
    import functools
    from gputext.kernels.jit import cpu_jit

    @functools.lru_cache(maxsize=None)
    def make(c):
        C = float(c)
        @cpu_jit
        def add(x):
            return x + C
        return add
''')

RUN = textwrap.dedent('''
    import sys, mod
    hits = misses = 0
    for c in range(int(sys.argv[1]), int(sys.argv[2])):
        f = mod.make(c)
        assert f(1.0) == 1.0 + c, (c, f(1.0))
        hits += sum(f.stats.cache_hits.values())
        misses += sum(f.stats.cache_misses.values())
    print(hits, misses)
''')


def _run(tmp: Path, cache: Path, lo: int, hi: int, wait: bool = True):
    env = child_env(ROOT, str(tmp), GPUTEXT_CACHE_DIR=str(cache))
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(lo), str(hi)], env=env, cwd=tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    hits, misses = map(int, out.split())
    return hits, misses


@pytest.fixture()
def module(tmp_path):
    (tmp_path / "mod.py").write_text(MODULE)
    return tmp_path


def test_second_process_loads_and_compiles_nothing(module, tmp_path):
    cache = tmp_path / "cache"
    assert _run(module, cache, 0, 3) == (0, 3)  # compiled and saved
    files = {p: p.stat().st_mtime_ns for p in cache.rglob("*.nb*")}
    assert len([p for p in files if p.suffix == ".nbc"]) == 3
    assert _run(module, cache, 0, 3) == (3, 0)  # every one loaded
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*.nb*")} == files  # nothing written


def test_changed_source_compiles_again(module, tmp_path):
    cache = tmp_path / "cache"
    assert _run(module, cache, 0, 2) == (0, 2)
    (module / "mod.py").write_text(MODULE.replace("return x + C", "return C + x"))
    assert _run(module, cache, 0, 2) == (0, 2)  # the file's content digest is the index's stamp
    assert _run(module, cache, 0, 2) == (2, 0)


def test_cache_folder_named_by_code_and_versions():
    from gputext.kernels.jit import cache_tag

    versions = {"numba": "0.68.1", "numba-cuda": "0.30.4", "numpy": "2.4.6", "python": "3.11.7"}
    tag = cache_tag("abc", versions)
    assert tag.startswith("code-") and tag == cache_tag("abc", dict(versions))
    assert cache_tag("abd", versions) != tag  # any source change of compiled code
    for name in versions:
        assert cache_tag("abc", {**versions, name: "other"}) != tag  # any compiler version


def test_source_digest_covers_kernels_not_cli(tmp_path):
    from gputext.kernels.jit import source_digest

    kernels, pkg = tmp_path / "kernels", tmp_path / "pkg"
    kernels.mkdir(), pkg.mkdir()
    (kernels / "a.py").write_text("x = 1\n")
    (pkg / "cli.py").write_text("print('help')\n")
    (pkg / "host.py").write_text("import numba\n")
    before = source_digest([kernels, pkg])
    (pkg / "cli.py").write_text("print('other help')\n")
    assert source_digest([kernels, pkg]) == before  # no compiled code there
    (pkg / "host.py").write_text("import numba\nx = 2\n")
    assert source_digest([kernels, pkg]) != before


def test_two_processes_filling_one_cache_leave_it_valid(module, tmp_path):
    """Two processes add different entries of one function's index at once (numba alone can leave
    an index entry pointing at the other process's code); a third loads all of them, right."""
    cache = tmp_path / "cache"
    procs = [_run(module, cache, 0, 12, wait=False), _run(module, cache, 12, 24, wait=False)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    hits, misses = _run(module, cache, 0, 24)  # asserts each value: a crossed entry would fail
    assert hits + misses == 24 and hits >= 12  # an index write may lose the other's entries, never mix them


def test_two_processes_needing_one_entry_compile_it_once(module, tmp_path):
    """Two processes that need the same entries at once (Dask workers, pytest-xdist, the helpers
    of gputext.compile_ahead): each entry is compiled by one of them and loaded by the other
    (kernels.jit._CompileOnce), whichever gets there first."""
    cache = tmp_path / "cache"
    procs = [_run(module, cache, 0, 8, wait=False) for _ in range(2)]
    counts = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        counts.append(tuple(map(int, out.split())))
    assert sum(m for _, m in counts) == 8 and sum(h for h, _ in counts) == 8, counts
    assert len(list(cache.rglob("*.nbc"))) == 8


def test_gputext_command_second_process_compiles_nothing(tmp_path):
    """The real twins: `knn search --device cpu` twice on a tiny corpus; the second writes nothing."""
    from gputext.io import write_corpus
    from gputext.io.corpus import Corpus
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = sp.random(40, 30, density=0.2, random_state=rng, format="csr", dtype=np.float32)
    write_corpus(Corpus(X), str(tmp_path / "c.h5"))
    cache = tmp_path / "cache"
    env = child_env(GPUTEXT_CACHE_DIR=str(cache))
    cmd = [sys.executable, "-m", "gputext", "knn", "search", "--index", "c.h5", "--exclude-self", "-k", "3", "-o", "nn.h5",
           "--device", "cpu", "-q"]
    subprocess.run(cmd, env=env, cwd=tmp_path, check=True, timeout=600)
    files = {p: p.stat().st_mtime_ns for p in cache.rglob("*.nb*")}
    assert files, "the first process cached nothing"
    subprocess.run(cmd, env=env, cwd=tmp_path, check=True, timeout=600)
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*.nb*")} == files


def test_device_kernels_get_the_cache_without_a_gpu(tmp_path):
    """Every cuda_kernel carries gputext's cache (numba-cuda's class, our folder and lock); the
    simulator pass has none (nothing to compile)."""
    from gputext.kernels import jit, postings

    folder = jit.cache_folder()
    assert folder is not None and folder.is_dir()
    cache = postings.block_starts_kernel._cache
    assert type(cache).__name__ == "KernelCache" and cache.cache_path == str(folder)
    assert type(cache._cache_file).__name__ == "Index"


DIGESTS = textwrap.dedent('''
    import sys
    if sys.argv[1] == "cli":  # as a command's process has it: the CLI and the engine loaded first
        import gputext.cli
        from gputext.engine import cuda_backend
    from gputext.kernels import blocked, unit_select
    from gputext.kernels.jit import closure_digest
    kernels = [blocked.rows_accumulate_kernel(256, 5120, 1, 2, True, True),
               blocked.rows_accumulate_kernel(256, 5120, 1, 2, True, False),
               unit_select.unit_topk_kernel(256, 2048), unit_select.unit_topk_kernel(256, 1024)]
    print(*[closure_digest(k.py_func) for k in kernels])
''')


def test_closure_digest_is_the_same_in_every_process_and_tells_geometries_apart(tmp_path):
    """The kernel cache keys a factory's kernel by closure_digest (kernels/jit.py), not by numba's
    pickle of the closure: two processes started differently, with other hash seeds, get the same
    digests for the same geometry (a compile helper and the command it helps), and another
    geometry gets another digest."""
    runs = []
    for mode, seed in (("cli", "1"), ("plain", "2")):
        done = subprocess.run([sys.executable, "-c", DIGESTS, mode], env=child_env(ROOT, PYTHONHASHSEED=seed),
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(done.stdout.split())
    assert runs[0] == runs[1] and "None" not in runs[0]
    assert len(set(runs[0])) == 4


def test_closure_digest_gives_up_on_what_it_cannot_name():
    from gputext.kernels.jit import closure_digest

    def make(x):
        return lambda: x

    assert closure_digest(make(3)) == closure_digest(make(3)) != closure_digest(make(4))
    assert closure_digest(make(object())) is None  # numba's own key then
