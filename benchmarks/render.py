"""The published tables, rendered from the records: every region between ``<!-- results:NAME -->`` and
``<!-- /results:NAME -->`` in README.md, docs/*.md and benchmarks/RESULTS.md is rewritten with view
NAME below (a table or a sentence), from the newest record of each figure.

    python -m benchmarks.render            # rewrite the regions (and benchmarks/summary.png with --plot)
    python -m benchmarks.render --check    # exit 1 naming each region that is out of date (CI)

A view never computes a figure: it picks records (records.newest) and formats their seconds,
ratios of two records of the same run, device and date.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from . import records as rec_mod
from .registry import ENTRY

ROOT = Path(__file__).resolve().parents[1]
REGION = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results:\2 -->)", re.S)
FILES = ("README.md", "docs/*.md", "benchmarks/RESULTS.md")

# The README's table: (family, our entry, the peer's entry, the peer's label); kernel times, GPU records
README_ROWS = [
    ("Exact kNN search", "knn-search/knn-1e6/gputext", "knn-search/knn-1e6/cupy-spmm", "CuPy SpMM + top-k"),
    ("Exact kNN search at 10^7", "knn-search/knn-1e7/gputext", "knn-search/knn-1e7/cupy-spmm", "CuPy SpMM + top-k"),
    ("kNN meta-features", "metafeatures/20ng/gputext", "metafeatures/20ng/cpu-twin", "our CPU twin (16 cores)"),
    ("Linear SVM (TRON)", "svm/20ng-meta/gputext", "svm/20ng-meta/sklearn-linearsvc", "LinearSVC (dual=False)"),
    ("Star clustering", "star-graph/reu-70k/gputext", "star-graph/reu-70k/cupy-spgemm", "CuPy SpGEMM graph"),
    ("Stream clustering", "stream-latency/1.6m-clusters/gputext", "stream-latency/1.6m-clusters/torch-spmv",
     "torch.sparse SpMV + argmax"),
    ("RankSVM", "rank-train/mslr-web30k/gputext", "rank-train/mslr-web30k/cpu-twin", "our CPU twin (16 cores)"),
]
CLI_FAMILIES = ["knn-search", "knn-classify-svm", "knn-classify-vote", "star", "stream", "rank-train", "library-knn",
                "library-classify", "startup"]
CLI_LABEL = {"knn-search": "knn search -k 30", "knn-classify-svm": "knn classify --model svm --features meta",
             "knn-classify-vote": "knn classify -k 30", "star": "cluster star --beta 0.25",
             "stream": "cluster stream", "rank-train": "rank train", "library-knn": "Python: NearestNeighbors(30)",
             "library-classify": "Python: KNeighborsClassifier(30)",
             "startup": "gputext --help"}


def fmt(seconds: float | None) -> str:
    """0.340 ms, 0.250 s, 59.14 s; an empty cell for None."""
    if seconds is None:
        return ""
    if seconds < 0.01:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s" if seconds < 10 else f"{seconds:.2f} s"


def short_device(rec: dict) -> str:
    """NVIDIA H100 for "NVIDIA H100 80GB HBM3"; a CPU's name as recorded."""
    words = rec["device"].split()
    return " ".join(words[:2]) if rec_mod.is_gpu(rec) else rec["device"]


def view_readme(recs: list) -> str:
    """The README's results table: one row per family, our kernel time against the best peer's."""
    out = ["| family | workload | gputext | best peer | ratio | device | date |", "|" + " --- |" * 7]
    for family, ours_name, peer_name, label in README_ROWS:
        ours, peer = rec_mod.newest_pair(recs, ours_name, peer_name, "kernel", gpu=True)  # a ratio from one run
        if ours is None or peer is None:
            continue
        ratio = peer["seconds"] / ours["seconds"]
        out.append(f"| {family} | {ENTRY[ours_name].workload} | {fmt(ours['seconds'])} | {label}: {fmt(peer['seconds'])} | "
                   f"{ratio:.{1 if ratio >= 2 else 2}f}x | {short_device(ours)} | {ours['date'][:10]} |")
    return "\n".join(out)


def view_knn_detail(recs: list) -> str:
    """One sentence: the single-query latencies and the growth from 10^6 to 10^7 documents."""
    # each pair from one run (same commit and device): figures of two runs are never compared
    q6, q7 = rec_mod.newest_pair(recs, "knn-query/knn-1e6/gputext", "knn-query/knn-1e7/gputext", "kernel", gpu=True)
    c6, c7 = rec_mod.newest_pair(recs, "knn-query/knn-1e6/cupy-spmm", "knn-query/knn-1e7/cupy-spmm", "kernel", gpu=True)
    s6, s7 = rec_mod.newest_pair(recs, "knn-search/knn-1e6/gputext", "knn-search/knn-1e7/gputext", "kernel", gpu=True)
    parts = []
    if q6 and q7:
        parts.append(f"One query took {fmt(q6['seconds'])} at 10^6 documents and {fmt(q7['seconds'])} at 10^7 "
                     f"(medians of 11; {short_device(q7)}, {q7['date'][:10]}" +
                     (f"; CuPy {fmt(c6['seconds'])} and {fmt(c7['seconds'])})" if c6 and c7 else ")"))
    if s6 and s7:
        parts.append(f"the 10,000 queries' time grew {s7['seconds'] / s6['seconds']:.1f}-fold from 10^6 to 10^7 documents.")
    return ", and ".join(parts) if parts else "(no records yet)"


def view_cpu_knn(recs: list) -> str:
    """One sentence: the CPU twin against scikit-learn's brute force on a CPU machine."""
    ours = rec_mod.newest(recs, "knn-search/knn-1e5/gputext", "kernel", gpu=False)
    peer = rec_mod.newest(recs, "knn-search/knn-1e5/sklearn-brute", "kernel", gpu=False)
    if not (ours and peer):
        return "(no records yet)"
    return (f"Without a GPU, the CPU twin runs exact kNN at {peer['seconds'] / ours['seconds']:.1f}x scikit-learn's brute "
            f"force ({ours['device']}; 10^5 documents, 1,000 queries: {fmt(ours['seconds'])} against "
            f"{fmt(peer['seconds'])}; {ours['date'][:10]}).")


def view_knn_scale(recs: list) -> str:
    """One sentence: 10,000 queries at 10^6 and 10^7 documents against CuPy, each pair from one run."""
    parts = []
    for size in ("1e6", "1e7"):
        ours, cupy = rec_mod.newest_pair(recs, f"knn-search/knn-{size}/gputext", f"knn-search/knn-{size}/cupy-spmm", "kernel",
                                         gpu=True)
        if ours:
            parts.append(f"10^{size[-1]} documents x 10,000 queries take {fmt(ours['seconds'])}, "
                         f"{cupy['seconds'] / ours['seconds']:.1f}x CuPy SpMM + top-k's {fmt(cupy['seconds'])} in the same run "
                         f"({short_device(ours)}, {ours['date'][:10]})")
    return "; ".join(parts) + "." if parts else "(no records yet)"


def _through_server(rec: dict) -> bool:
    return rec["measure"] == "library-server" or (rec["measure"] == "cli-warm" and "server" in (rec.get("params") or {}))


def view_cli(recs: list) -> str:
    """Fresh processes of the command line, measured from outside: cold (empty kernel cache), warm
    through the warm server (gputext.daemon, the default), warm in its own process
    (GPUTEXT_DAEMON=0; a "cli-warm" record from before the server is one of these) and its CPU
    time, a fresh process importing the command's library, and the same work in process; the
    newest record per entry and device."""
    out = ["| command | data | device | cold | warm | warm, own process | its CPU | imports | in process | date |",
           "|" + " --- |" * 10]
    seen = []
    for r in recs:
        key = (r["entry"], r["device"])
        if r["measure"] in ("cli-warm", "cli-warm-own", "library-warm", "library-server") and key not in seen:
            seen.append(key)
    order = {f: i for i, f in enumerate(CLI_FAMILIES)}
    seen.sort(key=lambda k: (k[1].startswith("CPU"), k[1], order.get(k[0].split("/")[0], 99), k[0]))

    def newest(rs):
        return max(rs, key=lambda r: r["date"]) if rs else None

    for name, device in seen:
        pick = [r for r in recs if r["entry"] == name and r["device"] == device]
        server = newest([r for r in pick if _through_server(r)])
        own = newest([r for r in pick if r["measure"] in ("cli-warm-own", "library-warm")
                      or (r["measure"] == "cli-warm" and not _through_server(r))])
        last = max((r for r in (server, own) if r), key=lambda r: r["date"])
        cold = newest([r for r in pick if r["measure"].endswith("-cold") and r["date"] <= last["date"]])
        kernel = newest([r for r in pick if r["measure"] == "kernel"])
        imports = newest([r for r in pick if r["measure"] == "import"])
        entry = ENTRY.get(name)
        family = entry.family if entry else name.split("/")[0]
        label = CLI_LABEL.get(family, family) + (" --device cpu" if entry and entry.peer == "cpu-twin" else "")
        cpu = own.get("cpu_seconds") if own else None
        scale = (last.get("params") or {}).get("scale", 1)
        data = name.split("/")[1] + (f" x {scale:g}" if scale != 1 else "")
        cell = lambda r: fmt(r["seconds"]) if r else ""  # noqa: E731
        out.append(f"| `{label}` | {data} | {short_device(last)} | {cell(cold)} | {cell(server)} | {cell(own)} | "
                   f"{fmt(cpu) if cpu else ''} | {cell(imports)} | {cell(kernel)} | {last['date'][:10]} |")
    return "\n".join(out)


def view_records(recs: list) -> str:
    """Every record, newest first: the figure, where and when, and its command."""
    out = ["| entry | measure | seconds | device | date | commit | command |", "|" + " --- |" * 7]
    for r in sorted(recs, key=lambda r: r["date"], reverse=True):
        cmd = r["command"] if r["command"] else f"({r.get('command_note', '')})"
        cmd = cmd.replace("|", "\\|")
        out.append(f"| {r['entry']} | {r['measure']} | {r['seconds']:.4g} | {r['device']} | {r['date']} | "
                   f"{r['commit'] or 'unknown'} | `{cmd}` |")
    return "\n".join(out)


def newest_each(recs: list, families: tuple) -> list:
    """The newest record of each (entry, measure, device) of ``families``, in the order of each
    key's first record."""
    newest = {}
    for r in recs:
        if r["family"] in families:
            key = (r["entry"], r["measure"], r["device"])
            if key not in newest or r["date"] >= newest[key]["date"]:
                newest[key] = r
    return list(newest.values())


def family_view(*families: str):
    """A view of one family's figures for its docs page: the newest record of each entry, measure
    and device, our entries first."""
    def view(recs: list) -> str:
        rows = sorted(newest_each(recs, families), key=lambda r: (families.index(r["family"]), r["dataset"], r["peer"] != "gputext",
                                                      r["peer"], r["measure"], r["device"]))
        out = ["| what | data | peer | measure | time | device | date |", "|" + " --- |" * 7]
        out += [f"| {ENTRY[r['entry']].workload if r['entry'] in ENTRY else r['workload']} | {r['dataset']} | {r['peer']} | "
                f"{r['measure']} | {fmt(r['seconds'])} | {short_device(r)} | {r['date'][:10]} |" for r in rows]
        return "\n".join(out)
    view.__doc__ = f"The records of {', '.join(families)}."
    return view


PERCENTILES = (("p50", "p50_ms", "{} ms"), ("p95", "p95_ms", "{} ms"), ("p99", "p99_ms", "{} ms"))

FIG18 = (("its compute", "update_compute", "{:.3f} s"), ("full recluster", "full_seconds", "{:.3f} s"),
         ("its compute", "full_compute", "{:.3f} s"), ("components loaded", "components_loaded", "{:,}"),
         ("of", "components_total", "{:,}"), ("vertices loaded", "vertices_loaded", "{:,}"))
F1 = (("micro-F1", "micro_f1", "{:.4f}"), ("macro-F1", "macro_f1", "{:.4f}"))
FIG18_RATIO = ("update / recluster, paired median", "ratio_paired_median", "{:.3f}")


def study_view(family: str, *columns: tuple):
    """A view of one study's records (a docs page's table of an older measurement): the newest
    record of each entry in the records' order, its time and ``columns`` ((header, params key,
    format) each: figures the run reported beside the time), device and date (with the time of
    day where the record has it: rows of one run share it)."""
    def view(recs: list) -> str:
        out = ["| what | time | " + "".join(f"{c[0]} | " for c in columns) + "device | date |",
               "|" + " --- |" * (4 + len(columns))]
        for r in newest_each(recs, (family,)):
            cells = "".join(f"{c[2].format(r['params'][c[1]]) if c[1] in r.get('params', {}) else ''} | "
                            for c in columns)
            out.append(f"| {r['workload']} | {fmt(r['seconds'])} | {cells}{short_device(r)} | "
                       f"{r['date'][:16].replace('T', ' ')} |")
        return "\n".join(out)
    view.__doc__ = f"The records of the study {family!r}."
    return view


VIEWS = {"readme": view_readme, "knn-detail": view_knn_detail, "cpu-knn": view_cpu_knn, "cli": view_cli,
         "records": view_records, "knn": family_view("knn-search", "knn-query", "library-knn"),
         "classify": family_view("knn-classify-vote", "knn-classify-svm", "library-classify", "metafeatures", "svm"),
         "star": family_view("star-graph", "star"), "stream": family_view("stream-latency", "stream"),
         "rank": family_view("rank-train"),
         "linearsvc-defaults": study_view("linearsvc-defaults", ("objective above the optimum", "max_rel_objective_gap",
                                                                 "{:.1e}"), ("solver", "solver", "{}")),
         "clustering-sweep": study_view("clustering-sweep", ("clusters", "n_clusters", "{:,}"),
                                        ("alone", "alone_fraction", "{:.1%}"), ("FBcubed F", "fbcubed_f", "{:.3f}"),
                                        ("NMI", "nmi", "{:.3f}")),
         "stream-latency-passes": study_view("stream-latency-passes", *PERCENTILES),
         "stream-latency-parts": study_view("stream-latency-parts"),
         "stream-cpu-latency": study_view("stream-cpu-latency"),
         "star-fig17": study_view("star-fig17", ("edges", "edges", "{:,}"), ("clusters", "clusters", "{:,}"),
                                  ("same as the CPU twin", "identical", "{}")),
         **{fam: study_view(fam, *FIG18) for fam in ("star-fig18-newtopics", "star-fig18-sametopic")},
         "star-dclus-goal": study_view("star-dclus-goal", *FIG18[:3], FIG18_RATIO,
                                       ("components touched", "components_touched", "{:,}"), FIG18[4],
                                       ("vertices touched", "affected_vertices", "{:,}")),
         "star-dclus-split": study_view("star-dclus-split", FIG18_RATIO),
         "star-dclus-format2": study_view("star-dclus-format2", *[(k, k, "{} s") for k in ("load", "cluster", "write")]),
         "classify-table-20ng": study_view("classify-table-20ng", *F1, ("C", "C", "{:g}")),
         "classify-svm-h100": study_view("classify-svm-h100", *F1, ("C", "C", "{:g}")),
         "svm-tolerance": study_view("svm-tolerance", *F1),
         **{fam: study_view(fam) for fam in ("meta-method", "meta-20ng-runs", "dense-one-query", "dense-batched",
                                             "engine-pruning", "engine-design", "knn-5e7", "rank-quick")},
         "ingest": study_view("ingest", ("CLI end to end (fresh process, incl. write)", "cli_end_to_end_s", "{} s")),
         "synth": study_view("synth", ("CPU s", "cpu_s", "{}"), ("peak RSS", "peak_rss", "{}"), ("file", "file", "{}")),
         "knn-scale": view_knn_scale}


def render_text(text: str, recs: list) -> str:
    """``text`` with every results region rewritten (an unknown view name is an error)."""
    def sub(m):
        name = m.group(2)
        if name not in VIEWS:
            raise KeyError(f"unknown results view {name!r}: {', '.join(VIEWS)}")
        return m.group(1) + VIEWS[name](recs).rstrip("\n") + "\n" + m.group(4)
    return REGION.sub(sub, text)


def files() -> list[Path]:
    out = []
    for pattern in FILES:
        out += sorted(ROOT.glob(pattern))
    return [p for p in out if REGION.search(p.read_text())]


def plot(recs: list, path: Path) -> None:
    """benchmarks/summary.png: the README table's speed-ups, one bar per family (log scale)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = []
    for family, ours_name, peer_name, label in README_ROWS:
        ours = rec_mod.newest(recs, ours_name, "kernel", gpu=True)
        peer = rec_mod.newest(recs, peer_name, "kernel", gpu=True)
        if ours and peer:
            ratio = peer["seconds"] / ours["seconds"]
            data.append((family, ratio, f"{ratio:.1f}x vs {label} ({short_device(ours).replace('NVIDIA ', '')})"))
    data = data[::-1]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(data) + 1.2), dpi=110)
    ax.barh(range(len(data)), [d[1] for d in data], color="#3b6ea8")
    ax.set_yticks(range(len(data)), [d[0] for d in data])
    ax.set_xscale("log")
    ax.axvline(1.0, color="#888", lw=1)
    for i, (_, ratio, label) in enumerate(data):
        ax.text(ratio * 1.05, i, label, va="center", fontsize=8)
    ax.set_xlim(0.8, max(d[1] for d in data) * 8)
    ax.set_xlabel("speed-up over the best peer (log scale; peer time / gputext time)")
    ax.set_title("gputext on one GPU (benchmarks/records)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.render", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 when a region is out of date")
    p.add_argument("--plot", action="store_true", help="also redraw benchmarks/summary.png")
    p.add_argument("--records", default=str(rec_mod.RECORDS_DIR), help="the records' folder")
    a = p.parse_args(argv)
    recs = rec_mod.load(Path(a.records))
    stale = []
    for path in files():
        text = path.read_text()
        new = render_text(text, recs)
        if new != text:
            stale.append(str(path.relative_to(ROOT)))
            if not a.check:
                path.write_text(new)
    if a.plot:
        plot(recs, ROOT / "benchmarks" / "summary.png")
    if a.check and stale:
        print("out of date with benchmarks/records (run python -m benchmarks.render): " + ", ".join(stale), file=sys.stderr)
        return 1
    print(("rewrote " + ", ".join(stale)) if stale else "every results region is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
