"""The peer registry: each outside library a script measures against is a small registered
function; a peer whose library is missing here is skipped with one line, a peer that fails is
recorded as an error, and neither stops the round."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

from .cli import log


@dataclass(frozen=True)
class Peer:
    name: str
    fn: Callable
    needs: tuple[str, ...]  # importable modules the peer uses (checked before it runs)
    gpu: bool  # True: runs only where the script has a real GPU
    what: str  # one line: the library call it measures

    def missing(self) -> list[str]:
        return [m for m in self.needs if importlib.util.find_spec(m) is None]


PEERS: dict[str, Peer] = {}


def peer(name: str, needs: tuple[str, ...] = (), gpu: bool = False):
    """Decorator: register ``fn`` as peer ``name`` (names are global: prefix them with the
    family, e.g. "star.cupy"). Its docstring's first line says what it measures."""
    def register(fn):
        if name in PEERS and PEERS[name].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"peer {name!r} registered twice")
        PEERS[name] = Peer(name, fn, tuple(needs), gpu, (fn.__doc__ or name).strip().splitlines()[0])
        return fn
    return register


def run_peers(names, *args, has_gpu: bool = True, prefix: str = "", **kwargs) -> dict:
    """Run the peers ``prefix + name`` for each name with the same arguments; returns
    {name: result}. Missing libraries: {"skipped": "...not installed"} and one log line; a GPU
    peer without a GPU, or a name nobody registered: left out (the latter with a line); an
    exception: {"error": "Type: message"} and one log line."""
    out = {}
    for name in names:
        p = PEERS.get(prefix + name)
        if p is None:
            log(f"peer {name} skipped: no such peer (registered: {', '.join(sorted(PEERS))})")
            continue
        if p.gpu and not has_gpu:
            continue
        missing = p.missing()
        if missing:
            out[name] = {"skipped": f"{', '.join(missing)} not installed"}
            log(f"peer {name} skipped: {out[name]['skipped']}")
            continue
        try:
            out[name] = p.fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run here is a recorded result
            msg = str(exc).splitlines()[0][:200] if str(exc) else ""
            out[name] = {"error": f"{type(exc).__name__}: {msg}"}
            log(f"peer {name} failed: {out[name]['error']}")
    return out
