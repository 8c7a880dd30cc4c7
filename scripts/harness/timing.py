"""Timing as docs/ and the device method ask: warm up first, repeat, take the median; device
work is timed with CUDA events around it (numba, CuPy or PyTorch events, whichever library
launched it), host work with a wall clock after the device is synchronised."""
from __future__ import annotations

import statistics
import time

import numpy as np


def median(values) -> float | None:
    values = list(values)
    return float(statistics.median(values)) if values else None


def percentiles_ms(seconds, ps=(50, 95, 99)) -> dict:
    """{"p50_ms": ..., ...} of a list of seconds, rounded to 0.1 us."""
    p = np.percentile(np.asarray(seconds, dtype=np.float64) * 1e3, ps)
    return {f"p{q}_ms": round(float(v), 4) for q, v in zip(ps, p)}


class _Clock:
    """start(), stop() -> elapsed ms, sync(): CUDA events of one library, or the host clock."""

    def __init__(self, kind: str):
        self.kind = kind
        if kind == "numba":
            from numba import cuda
            from gputext.backend import simulator_enabled
            if simulator_enabled():  # the simulator's events are host clocks anyway
                self.kind, self._sync = "host", cuda.synchronize
            else:
                self._event, self._sync = cuda.event, cuda.synchronize
                self._elapsed = cuda.event_elapsed_time
        elif kind == "cupy":
            import cupy as cp
            self._event, self._sync = cp.cuda.Event, cp.cuda.Device().synchronize
            self._elapsed = cp.cuda.get_elapsed_time
        elif kind == "torch":
            import torch
            self._event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
            self._sync, self._elapsed = torch.cuda.synchronize, lambda a, b: a.elapsed_time(b)
        elif kind == "host":
            self._sync = lambda: None  # noqa: E731
        else:
            raise ValueError(f"unknown clock {kind!r}: numba, cupy, torch or host")

    def sync(self):
        self._sync()

    def start(self):
        if self.kind == "host":
            self.sync()
            self._t0 = time.perf_counter()
        else:
            self._e0, self._e1 = self._event(), self._event()
            self._e0.record()

    def stop(self) -> float:
        if self.kind == "host":
            self.sync()
            return (time.perf_counter() - self._t0) * 1e3
        self._e1.record()
        self._e1.synchronize()
        return float(self._elapsed(self._e0, self._e1))


def gpu_ms(fn, repeats: int = 10, warmup: int = 2, clock: str = "numba", samples: list | None = None) -> float:
    """Median milliseconds of ``fn()`` between two CUDA events on the default stream, after
    ``warmup`` untimed calls and a synchronise. ``clock``: the library whose events bracket the
    call ("numba", "cupy", "torch"; "host": wall clock, synchronised); under numba's CUDA
    simulator the numba clock is the host's. ``samples``, when given, receives every timing."""
    c = _Clock(clock)
    for _ in range(warmup):
        fn()
    c.sync()
    out = []
    for _ in range(max(1, repeats)):
        c.start()
        fn()
        out.append(c.stop())
    if samples is not None:
        samples.extend(out)
    return float(statistics.median(out))


SHORT_S = 0.05  # a call faster than this is timed at least SHORT_REPEATS times ...
SHORT_REPEATS = 11  # ... (one run of a sub-millisecond search is noise: 0.99 and 1.41 ms for one query, H100)


def wall_runs(fn, repeats: int, warmup: int = 1):
    """``warmup`` untimed calls (compilation), then ``repeats`` timed calls of a synchronous
    ``fn`` (at least SHORT_REPEATS when the first takes under SHORT_S, whatever ``repeats``);
    returns (median seconds, the result of the run nearest the median, all seconds)."""
    for _ in range(warmup):
        fn()
    runs = []
    want = max(1, repeats)
    while len(runs) < want:
        t = time.perf_counter()
        res = fn()
        runs.append((time.perf_counter() - t, res))
        if len(runs) == 1 and runs[0][0] < SHORT_S:
            want = max(want, SHORT_REPEATS)
    secs = [s for s, _ in runs]
    med = statistics.median(secs)
    return med, min(runs, key=lambda r: abs(r[0] - med))[1], secs
