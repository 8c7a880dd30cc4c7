"""The benchmark harness every script in scripts/ is built on (issue 15 item 5).

A script is a short definition of its workloads and peers on top of these pieces:

  cli      ``parser()``: the common options (--quick, --device, --out: default $OUT or out/) and
           ``log()`` (stderr, time-stamped: stdout is kept for the markdown report);
  env      ``probe()``: host, date, git commit, Python / NumPy / SciPy / numba / numba-cuda
           versions, CPU count and numba threads, backend; on a real GPU its name, driver, memory
           and (asked for) the measured device-to-device copy bandwidth, the reference every
           bandwidth figure is a fraction of; ``datasets()``: where the real datasets are;
  timing   ``gpu_ms()``: warm-up, then the median of CUDA-event timings (numba, CuPy or PyTorch
           events; host wall after a synchronise where there is no real GPU); ``wall_runs()``:
           warm-up + median of host wall times of synchronous calls; ``percentiles_ms()``;
  peers    ``@peer(name, needs=...)`` registers a small function that measures one outside
           library (CuPy, PyTorch, scikit-learn, our CPU twin); ``run_peers()`` runs the ones asked
           for, skips those whose libraries are missing here with one line, and records a failure
           as ``{"error": ...}`` without stopping the round;
  plot     ``figure()``: a matplotlib (Agg) figure saved and closed at the end of a with-block;
           ``style()``: titles, labels, log scales, grid and legend of one axis;
  report   ``Report``: sections that fail are recorded and the others still run, rows of a
           markdown table, ``md_table()``, and ``write()``: the JSON and the markdown written once,
           at the end, and the markdown printed last (the device tool returns the output's tail).

Scripts import it as ``import harness`` after putting scripts/ on sys.path (two lines at the
top of each script, so that they also work when a test loads them by path); importing it puts the
checkout's root first on sys.path, so the scripts measure the checkout's gputext even where a
wheel is installed too. ``python -m harness`` (from scripts/) prints the probe as JSON.

A script, in outline (scripts/gpu_stream.py and gpu_star.py are full examples)::

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    @harness.peer("fam.cupy", needs=("cupy",), gpu=True)
    def peer_cupy(X, k):
        "cuSPARSE SpMM + top-k through CuPy (the docstring: what the peer measures)"
        ...
        return {"ms": harness.gpu_ms(run, 10, clock="cupy")}

    def main(argv=None):
        args = harness.parser(__doc__).parse_args(argv)
        backend = resolve(args.device)
        rep = harness.Report(args.out, {"env": harness.probe(backend, copy_bytes=1 << 30)})
        rep.section("speed", speed, backend, timed=True)
        rep.results["peers"] = harness.run_peers(["cupy"], X, 30, has_gpu=backend.is_cuda, prefix="fam.")
        rep.write("fam.json", markdown(rep.results))
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if sys.path[:1] != [ROOT]:  # first, before an installed gputext (the device host's wheel in /tmp/site)
    sys.path[:] = [ROOT] + [p for p in sys.path if os.path.abspath(p or ".") != ROOT]

from .cli import SUPPRESS, log, parser  # noqa: E402
from .env import copy_bandwidth, datasets, device_name, probe  # noqa: E402
from .peers import PEERS, peer, run_peers  # noqa: E402
from .plot import figure, have_pyplot, style  # noqa: E402
from .report import Report, md_table, write_json  # noqa: E402
from .timing import gpu_ms, median, percentiles_ms, wall_runs  # noqa: E402

__all__ = ["ROOT", "SUPPRESS", "log", "parser", "probe", "copy_bandwidth", "datasets", "device_name", "gpu_ms", "wall_runs", "median",
           "percentiles_ms", "PEERS", "peer", "run_peers", "Report", "md_table", "write_json",
           "figure", "have_pyplot", "style"]
