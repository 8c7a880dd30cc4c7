"""Start-up cost: small commands import no more than they need (issue 15 item 6).

``gputext --help`` loads click and the command groups only (no numpy, SciPy, h5py or numba), and
``gputext corpus info`` reads the file without numba; each runs in a fresh interpreter.
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
