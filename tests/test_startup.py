"""Start-up cost: small commands import no more than they need (issue 15 item 6).

``gputext --help`` loads click and the command groups only (no numpy, SciPy, h5py or numba), so does
the --help of every group and command, ``gputext corpus info`` reads the file without numba, and
``gputext rank train`` on the CPU imports no numba.cuda and compiles nothing once numba's cache is
warm; each runs in a fresh interpreter.
The figures themselves are measured by scripts/startup_times.py, not here.
"""
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

HEAVY = {"numba", "numpy", "scipy", "h5py", "sklearn"}


def _top_level_modules_after(args, cwd) -> set:
    code = ("import sys\nfrom gputext.cli import main\nsys.argv = ['gputext'] + %r\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))") % (list(args),)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300)
    line = [x for x in out.stdout.splitlines() if x.startswith("MODULES")]
    assert line, out.stderr[-2000:]
    return set(line[-1].split()[1:])


def test_help_imports_no_library_code(tmp_path):
    assert _top_level_modules_after(["--help"], tmp_path) & HEAVY == set()


def test_corpus_info_imports_no_numba(tmp_path):
    from gputext.io import Corpus, write_corpus
    path = tmp_path / "small.h5"
    write_corpus(Corpus(sp.random(5, 7, density=0.5, format="csr", dtype=np.float32, random_state=1)), str(path))
    loaded = _top_level_modules_after(["corpus", "info", str(path)], tmp_path)
    assert "h5py" in loaded and "numba" not in loaded


def test_every_group_and_command_help_imports_no_library_code(tmp_path):
    # one fresh interpreter renders the help of every group and command (what `gputext knn --help`
    # and `gputext knn search --help` do: click imports a command's module to show it)
    code = ("import sys, click\nfrom gputext.cli import cli\n"
            "def walk(cmd, ctx):\n"
            "    cmd.get_help(ctx)\n"
            "    if isinstance(cmd, click.Group):\n"
            "        for name in cmd.list_commands(ctx):\n"
            "            sub = cmd.get_command(ctx, name)\n"
            "            walk(sub, click.Context(sub, info_name=name, parent=ctx))\n"
            "walk(cli, click.Context(cli, info_name='gputext'))\n"
            "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    line = [x for x in out.stdout.splitlines() if x.startswith("MODULES")]
    assert line, out.stderr[-2000:]
    assert set(line[-1].split()[1:]) & HEAVY == set()


def test_cpu_rank_train_imports_no_numba_cuda_and_compiles_nothing_when_warm(tmp_path):
    from gputext.io import Corpus, write_corpus

    rng = np.random.default_rng(0)
    X = sp.random(40, 6, density=0.6, format="csr", dtype=np.float32, random_state=2)
    obs = {"qid": np.repeat(np.arange(5), 8), "relevance": rng.integers(0, 3, 40).astype(np.float64)}
    write_corpus(Corpus(X, obs=obs), str(tmp_path / "ltr.h5"))
    code = ("import sys\nfrom numba.core.registry import CPUDispatcher\nfrom gputext.cli import main\n"
            "sys.argv = ['gputext', 'rank', 'train', 'ltr.h5', '-o', 'm.h5', '-q', '--device', 'cpu']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "import gc\n"
            "compiled = [f'{d.py_func.__module__}.{d.py_func.__name__}' for d in gc.get_objects()\n"
            "            if isinstance(d, CPUDispatcher) and d.stats.cache_misses]\n"
            "print('RESULT', 'numba.cuda' in sys.modules, ' '.join(compiled))")
    for _ in range(2):  # the first run may fill numba's cache
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
    assert line, out.stderr[-2000:]
    assert line[-1].split()[1:] == ["False"], line[-1]  # no numba.cuda, nothing compiled in the warm run
