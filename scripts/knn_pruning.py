#!/usr/bin/env python3
"""How much the blocked top-k's safe pruning skips (issue 19): the fraction of postings left
unscored at k = 10 and k = 100 (cosine) on the benchmark corpus and on 20 Newsgroups.

For each corpus and k, ``search_topk(method="blocked")`` on --device with the pruning on
(Geometry(blocked_prune=True); off by default) reports the postings it scored and those it skipped (blocks whose
bound cannot reach a query's running k-th key); the fraction skipped is skipped / (scored +
skipped). Exactness: the pruned result equals the rows method's on the same device and the
unpruned blocked result, bit for bit. Times are for the pruned and unpruned runs, one each.

The CPU twin prunes against each query's running top-k as it walks the document blocks in order;
the CUDA path takes its thresholds from a probe pass over a few blocks per query tile, so its
counts differ (RESULTS.md has the GPU's).

Corpora: the benchmark corpus of scripts/bench_knn.py (gputext.datasets.synth.make_corpus: Zipf
terms, 200,000-term vocabulary, ~60 distinct terms a document, tf-idf; --docs documents, --queries
further documents of the same model as queries) and 20NG (train as the index, the test set as
queries; tf-idf, df < 6 dropped, as make table-metafeatures).

  python scripts/knn_pruning.py --device cpu --docs 1e5 --queries 1000 --out out/pruning
  python scripts/knn_pruning.py --quick          # 2e4 documents, 200 queries, 20NG's first 500 test documents
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402


def corpora(a):
    """[(name, index rows CSR, query rows CSR)]."""
    from types import SimpleNamespace

    from bench_knn import make_data
    out = []
    X, Q, _ = make_data(a.docs, a.queries, SimpleNamespace(terms=a.terms, terms_per_doc=60))
    out.append((f"bench_knn corpus, {a.docs:,} docs", X, Q))
    ddir = harness.datasets(a.datasets)
    if ddir is None or not (ddir / "20newsgroups").is_dir():
        harness.log("20 Newsgroups not found (--datasets): its rows are skipped")
        return out
    from gputext.io import read_corpus
    from table_metafeatures import build
    tr, te = build("20ng", ddir, Path(os.environ.get("TMPDIR", "/tmp")) / "gputext-pruning-corpora", False)
    train, test = read_corpus(tr), read_corpus(te)
    Qt = test.X[: 500] if a.quick else test.X
    out.append((f"20 Newsgroups, {train.n_docs:,} docs", train.X, Qt))
    return out


def measure(name, X, Q, k, backend) -> dict:
    from gputext.engine import Geometry, Index, search_topk
    index = Index.from_csr(X)
    rows = search_topk(index, Q, k, "cosine", backend, method="rows")
    stats: dict = {}
    t = time.perf_counter()
    pruned = search_topk(index, Q, k, "cosine", backend, method="blocked", stats=stats,
                         geometry=Geometry(blocked_prune=True))
    t_pruned = time.perf_counter() - t
    plain_stats: dict = {}
    t = time.perf_counter()
    plain = search_topk(index, Q, k, "cosine", backend, method="blocked", stats=plain_stats,
                        geometry=Geometry(blocked_prune=False))
    t_plain = time.perf_counter() - t
    scored, skipped = int(stats["postings"]), int(stats["postings_skipped"])
    same = all(np.array_equal(a, b, equal_nan=True) for r in (rows, plain) for a, b in zip(pruned, r))
    row = {"corpus": name, "queries": int(Q.shape[0]), "k": k, "postings_scored": scored,
           "postings_skipped": skipped, "fraction_skipped": skipped / max(1, scored + skipped),
           "postings_unpruned": int(plain_stats["postings"]), "seconds_pruned": t_pruned,
           "seconds_unpruned": t_plain, "equal_rows_and_unpruned": bool(same)}
    harness.log(f"{name}, k = {k}: skipped {skipped:,} of {scored + skipped:,} postings "
                f"({row['fraction_skipped']:.1%}), {t_pruned:.2f} s pruned / {t_plain:.2f} s not, exact {same}")
    return row


def main(argv=None):
    p = harness.parser(__doc__, quick="2e4 documents, 200 queries, 500 20NG test documents",
                       out=os.environ.get("OUT") or "out/pruning")
    p.add_argument("--docs", type=float, default=1e5)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--terms", type=int, default=200_000)
    p.add_argument("--k", default="10,100")
    p.add_argument("--datasets")
    a = p.parse_args(argv)
    if a.quick:
        a.docs, a.queries, a.terms = 2e4, 200, 20_000
    a.docs = int(a.docs)
    from gputext.backend import resolve
    backend = resolve(a.device)
    report = harness.Report(a.out, {"env": harness.probe(backend), "rows": []})
    for name, X, Q in corpora(a):
        for k in (int(v) for v in a.k.split(",")):
            report.results["rows"].append(measure(name, X, Q, k, backend))
    rows = report.results["rows"]
    md = (f"# Safe pruning of the blocked top-k ({backend.describe()})\n\n" + harness.md_table(
        ("corpus", "queries", "k", "postings scored", "skipped", "fraction skipped", "time pruned / not (s)", "exact"),
        [(r["corpus"], r["queries"], r["k"], f"{r['postings_scored']:,}", f"{r['postings_skipped']:,}",
          f"{r['fraction_skipped']:.1%}", f"{r['seconds_pruned']:.2f} / {r['seconds_unpruned']:.2f}",
          "yes" if r["equal_rows_and_unpruned"] else "NO") for r in rows]))
    report.write("knn_pruning.json", md, "knn_pruning.md")
    if not all(r["equal_rows_and_unpruned"] for r in rows):
        sys.exit("the pruned result differs from the exhaustive one")


if __name__ == "__main__":
    main()
