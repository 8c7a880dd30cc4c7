#!/usr/bin/env python3
"""The README's results figure: gputext's speed-up over the best peer, one bar per family, from
benchmarks/summary.csv (figures taken from benchmarks/RESULTS.md, which keeps the history).

  python scripts/plot_summary.py                       # writes benchmarks/summary.png
  python scripts/plot_summary.py --csv FILE --out FILE.png
  python scripts/plot_summary.py --markdown            # print the README's table (tests check the README has it)
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def speedups(rows: list[dict]) -> list[tuple[str, float, str]]:
    """(family, speed-up, label) per row: the ratio RESULTS.md reports (from unrounded times)."""
    out = []
    for r in rows:
        ratio = float(r["ratio"])
        out.append((r["family"], ratio, f"{r['ratio']}x vs {r['peer'].split(':')[0]} ({r['device'].replace('NVIDIA ', '')})"))
    return out


def markdown(rows: list[dict]) -> str:
    """The README's results table (one row per family)."""
    out = ["| family | workload | gputext | best peer | ratio | device | date |", "|" + " --- |" * 7]
    out += [f"| {r['family']} | {r['workload']} | {r['gputext']} | {r['peer']} | {r['ratio']}x | {r['device']} | {r['date']} |"
            for r in rows]
    return "\n".join(out)


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = speedups(rows)[::-1]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(data) + 1.2), dpi=110)
    y = range(len(data))
    ax.barh(list(y), [d[1] for d in data], color="#3b6ea8")
    ax.set_yticks(list(y), [d[0] for d in data])
    ax.set_xscale("log")
    ax.axvline(1.0, color="#888", lw=1)
    for i, (_, ratio, label) in enumerate(data):
        ax.text(ratio * 1.05, i, label, va="center", fontsize=8)
    ax.set_xlim(0.8, max(d[1] for d in data) * 8)
    ax.set_xlabel("speed-up over the best peer (log scale; peer time / gputext time)")
    ax.set_title("gputext on one GPU (benchmarks/RESULTS.md)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", default=str(ROOT / "benchmarks" / "summary.csv"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "summary.png"))
    p.add_argument("--markdown", action="store_true", help="print the markdown table instead of plotting")
    a = p.parse_args()
    if a.markdown:
        print(markdown(read_rows(Path(a.csv))))
        return
    plot(read_rows(Path(a.csv)), Path(a.out))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
