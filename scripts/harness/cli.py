"""The options every benchmark script shares, and its log line."""
from __future__ import annotations

import argparse
from argparse import SUPPRESS  # noqa: F401  (hidden options: --tiny)
import os
import sys
import time


def log(msg: str) -> None:
    """One progress line on stderr, time-stamped (stdout carries the markdown report)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parser(doc: str | None, *, quick: str | None = "small sizes (under a minute)",
           devices: tuple[str, ...] | None = ("auto", "cpu", "cuda"), out: str | None = None,
           device_help: str | None = None) -> argparse.ArgumentParser:
    """An ArgumentParser with the module docstring as its description and the common options:
    --quick (``quick`` is its help; None: no such option), --device (``devices`` are its choices,
    the first the default; None: no such option) and --out (default ``out`` or $OUT or out/)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if quick is not None:
        p.add_argument("--quick", action="store_true", help=quick)
    if devices is not None:
        p.add_argument("--device", default=devices[0], choices=list(devices), help=device_help)
    p.add_argument("--out", default=out or os.environ.get("OUT") or "out", help="folder for the JSON and markdown")
    return p
