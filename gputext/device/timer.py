"""The one stage timer (CUDA events + host wall time) and the typed run report it fills.

    timer = StageTimer(on=True, stream=stream)   # on=False: every call is a no-op (no events)
    ...upload...
    timer.mark("upload")          # closes the interval since the last mark into stage "upload"
    ...kernels...
    timer.mark("kernels")
    timer.host("certificate")     # host-only interval (no event)
    report.stages_ms.update(timer.device_ms())   # reads the events once (one synchronisation)
    report.host_ms.update(timer.host_ms)

Device intervals are event pairs on ``stream`` read at the end, so marking does not synchronise
(``sync=True`` synchronises at each mark instead, so that a stage's figure includes the host
work that fed it: the dense search's profile). The simulator's events do not time: device
figures are then absent (host figures are kept).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


@dataclass
class RunReport:
    """What a run did, filled by the driver that ran it.

    backend: "cpu", "cuda" or "cuda (simulator)"; seconds: host wall time of the whole call;
    stages_ms: device time per stage (CUDA events); host_ms: host wall time per stage. Families
    subclass it with their own fields (counts, sizes, choices); ``as_stats()`` is the flat dict
    view that the ``stats=`` arguments of the public functions receive.
    """

    backend: str = ""
    seconds: float = 0.0
    stages_ms: dict = field(default_factory=dict)
    host_ms: dict = field(default_factory=dict)

    def as_stats(self) -> dict:
        """Fields with a value, as a plain dict (empty stage dicts left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}

    def into(self, stats: dict | None) -> None:
        """Update a caller's stats dict with ``as_stats()`` (nothing when stats is None)."""
        if stats is not None:
            stats.update(self.as_stats())


class StageTimer:
    """Named stages timed by CUDA events on one stream and by the host clock (module docstring)."""

    def __init__(self, on: bool = True, stream=None, sync: bool = False, device: bool = True):
        self.on = bool(on)
        self.stream = stream
        self.sync = sync
        self.device = bool(device) and self.on
        self.pairs: list = []  # (stage, start event, end event)
        self.host_ms: dict[str, float] = {}
        self._event = self._record()
        self._t = time.perf_counter()

    def _record(self):
        if not self.device:
            return None
        from numba import cuda
        ev = cuda.event()
        if self.stream is None:
            ev.record()
        else:
            ev.record(self.stream)
        return ev

    def restart(self) -> None:
        """Start a new interval now (what ran since the last mark is not counted)."""
        if self.on:
            self._event = self._record()
            self._t = time.perf_counter()

    def mark(self, stage: str) -> None:
        """Close the running interval into ``stage`` (device and host) and start the next."""
        if not self.on:
            return
        ev = self._record()
        if self.sync and ev is not None:
            ev.synchronize()
        now = time.perf_counter()
        self.host_ms[stage] = self.host_ms.get(stage, 0.0) + 1e3 * (now - self._t)
        self._t = now
        if ev is not None:
            self.pairs.append((stage, self._event, ev))
        self._event = ev

    def host(self, stage: str) -> None:
        """Close the running interval into ``stage`` as host time only."""
        if not self.on:
            return
        now = time.perf_counter()
        self.host_ms[stage] = self.host_ms.get(stage, 0.0) + 1e3 * (now - self._t)
        self._t = now
        self._event = self._record() if self.device else None

    def device_ms(self) -> dict[str, float]:
        """Device milliseconds per stage (sums over repeated stages); {} when off or simulated."""
        out: dict[str, float] = {}
        if not self.pairs:
            return out
        self.pairs[-1][2].synchronize()
        for stage, a, b in self.pairs:
            ms = elapsed_ms(a, b)
            if ms is not None:
                out[stage] = out.get(stage, 0.0) + ms
        return out


def elapsed_ms(a, b) -> float | None:
    """Milliseconds between two recorded events (None where events do not time: the simulator)."""
    try:
        return float(a.elapsed_time(b))
    except Exception:
        return None
