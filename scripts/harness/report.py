"""A benchmark's results: sections that fail without stopping the round, rows of the summary
table, and the JSON + markdown written once at the end."""
from __future__ import annotations

import json
import os
import time
import traceback

from .cli import log


def _plain(o):
    """JSON for NumPy scalars and arrays; anything else as its string."""
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def write_json(path: str, data, indent: int = 1) -> str:
    """Write ``data`` as JSON (NumPy values converted), creating the folder; returns the path."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as fh:
        json.dump(data, fh, indent=indent, default=_plain)
    return path


def md_table(header, rows, align: str | None = None) -> str:
    """A markdown table: ``header`` is a list of column names, each row a list of cells;
    ``align``: one letter a column, "l" or "r" (right-aligned, for numbers); default all left."""
    marks = [" ---: |" if a == "r" else " --- |" for a in (align or "l" * len(header))]
    out = ["| " + " | ".join(header) + " |", "|" + "".join(marks)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


class Report:
    """``results`` (the JSON's top level) and ``table`` (section, measurement, value, note rows).

    ``section(name, fn, *args)`` stores fn's return value under ``results[key][name]`` (``key``
    None: the top level) or, when it raises, ``{"error", "traceback"}`` and a log line; its
    seconds go to ``results["section_seconds"]`` when ``timed``. ``write()`` writes the JSON
    (and the markdown when a name is given) once and prints the markdown last."""

    def __init__(self, out: str, results: dict | None = None):
        self.out = out
        self.results = {} if results is None else results
        self.table: list[tuple] = []

    def section(self, name, fn, *args, key: str | None = None, timed: bool = False, **kwargs):
        t0 = time.perf_counter()
        into = self.results if key is None else self.results.setdefault(key, {})
        try:
            into[name] = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - keep going: a failed section is a recorded result
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            into[name] = {"error": f"{type(exc).__name__}: {first}", "traceback": traceback.format_exc()}
            log(f"[{name}] FAILED: {into[name]['error']}")
            self.row(name, "ERROR", into[name]["error"])
        if timed:
            self.results.setdefault("section_seconds", {})[name] = round(time.perf_counter() - t0, 2)
        return into[name]

    def row(self, section, what, value, note=""):
        self.table.append((section, what, value, note))
        log(f"  {section} | {what}: {value} {note}")

    def rows_md(self, header=("section", "measurement", "value", "goal / note")) -> str:
        return md_table(header, self.table)

    def write(self, json_name: str, markdown: str = "", md_name: str | None = None, indent: int = 1) -> str:
        """Write ``results`` to OUT/json_name and ``markdown`` to OUT/md_name (if given), then
        print the markdown; returns the JSON's path."""
        path = write_json(os.path.join(self.out, json_name), self.results, indent)
        if md_name:
            with open(os.path.join(self.out, md_name), "w") as fh:
                fh.write(markdown.rstrip("\n") + "\n")
        log(f"wrote {path}" + (f" and {md_name}" if md_name else ""))
        if markdown:
            print(markdown, flush=True)
        return path

    def write_table(self, out: str, name: str) -> str:
        """For a script whose report is its row table (gpu_meta, gpu_knn_classify): the rows go
        under results["table"], OUT/name.json is written and "## name (device, date, seconds)"
        over the table is printed (device, date, seconds and quick read from results)."""
        r = self.results
        self.out, r["table"] = out, self.table
        title = f"{name} ({r.get('device')}, {r.get('date')}, {r.get('seconds', 0):.0f} s{', quick' if r.get('quick') else ''})"
        return self.write(f"{name}.json", f"\n## {title}\n\n" + self.rows_md())
