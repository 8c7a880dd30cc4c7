#!/usr/bin/env python3
"""The estimators' overhead: gputext.NearestNeighbors.kneighbors against gputext.engine.search_topk
on the same index, queries and device, in one run (issue 16's goal: within 5% at 10,000 queries
and 10^6 documents on the GPU host).

Corpus and queries as scripts/bench_knn.py (gputext.datasets.synth.make_corpus: Zipf terms, ~60
distinct terms a document, 200,000-term vocabulary, tf-idf; queries weighted with the index's idf),
k = 30, cosine. The estimator is fitted with algorithm="inverted" (the engine's method; "auto" may
pick the dense method on a GPU, which is another engine). Both calls are synchronous and return
host arrays, so each is timed by the host's wall clock: one untimed call of each first (compiles,
builds the device index), then --repeats rounds, each timing the engine and then the estimator
(interleaved, so that drift affects both); medians. The estimator's own work (query checks and
distance conversion: everything kneighbors does besides the engine call) is also timed alone, since
on a shared machine the searches' run-to-run noise is larger than it. Checks: the estimator's
indices equal the engine's and its distances are exactly 1 - the engine's float32 scores (in float64).

  python scripts/bench_estimators.py --device cpu --quick              # any machine, a minute
  python scripts/bench_estimators.py --device cpu --docs 1e5 --queries 1000
  python scripts/bench_estimators.py --device cuda                     # GPU host: 10^6 documents, 10,000 queries

Writes bench_estimators.json and bench_estimators.md into --out (default $OUT or out/).
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402


def options():
    p = harness.parser(__doc__, quick="20,000 documents, 200 queries")
    p.add_argument("--docs", type=float, default=1e6, help="indexed documents")
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("--k", type=int, default=30)
    p.add_argument("--terms", type=int, default=200_000)
    p.add_argument("--terms-per-doc", type=float, default=60)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    if a.quick:
        a.docs, a.queries, a.repeats = 2e4, 200, 3
    return a


def make_data(a):
    from gputext.datasets.synth import make_corpus
    from gputext.io.weighting import Reference
    corpus = make_corpus(int(a.docs), a.terms, a.terms_per_doc, 20, seed=1)
    reference = Reference(np.asarray(corpus.var["df"]), corpus.n_docs)
    Q = make_corpus(a.queries, a.terms, a.terms_per_doc, 20, seed=2, model_seed=1, reference=reference).X
    return corpus.X, Q


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def own_work_s(nn, Q, idx, scores, repeats: int) -> float:
    """Median seconds of what kneighbors does besides the engine call: the query checks
    (scikit-learn's validate_data, canonical CSR, finiteness) and the distance / index conversion.
    Timed alone it does not drown in the run-to-run noise of the searches on a shared machine."""
    from gputext.estimators.inputs import check_finite_float32, check_X
    from gputext.estimators.neighbor_params import to_distance

    def work():
        check_finite_float32(check_X(nn, Q, reset=False))
        to_distance(scores, "cosine"), idx.astype(np.intp)
    return harness.median(timed(work)[0] for _ in range(max(5, repeats)))


def measure(a, report):
    from gputext import NearestNeighbors
    from gputext.backend import resolve
    from gputext.engine import Index, search_topk
    from gputext.estimators.neighbor_params import to_distance

    t0 = time.perf_counter()
    X, Q = make_data(a)
    harness.log(f"corpus {X.shape[0]:,} x {X.shape[1]:,} ({X.nnz:,} nonzeros), {Q.shape[0]:,} queries "
                f"in {time.perf_counter() - t0:.1f} s")
    backend = resolve(a.device)
    index = Index.from_csr(X)
    fit_s, nn = timed(lambda: NearestNeighbors(n_neighbors=a.k, metric="cosine", algorithm="inverted", device=a.device).fit(X))
    engine = lambda: search_topk(index, Q, a.k, "cosine", backend)  # noqa: E731
    estimator = lambda: nn.kneighbors(Q)  # noqa: E731
    first_engine, (idx, scores) = timed(engine)
    first_estimator, (dist, ind) = timed(estimator)
    same = bool(np.array_equal(ind, idx) and np.array_equal(dist, to_distance(scores, "cosine")))
    t_engine, t_estimator = [], []
    for r in range(a.repeats):
        t_engine.append(timed(engine)[0])
        t_estimator.append(timed(estimator)[0])
        harness.log(f"round {r + 1}: engine {t_engine[-1] * 1e3:.1f} ms, estimator {t_estimator[-1] * 1e3:.1f} ms")
    m_engine, m_estimator = harness.median(t_engine), harness.median(t_estimator)
    ratio = m_estimator / m_engine
    own = own_work_s(nn, Q, idx, scores, a.repeats)
    out = {"n_docs": X.shape[0], "n_terms": X.shape[1], "nnz": int(X.nnz), "n_queries": Q.shape[0], "k": a.k,
           "backend": backend.name, "effective_algorithm": nn.effective_algorithm_,
           "engine_s": t_engine, "estimator_s": t_estimator, "engine_median_s": m_engine,
           "estimator_median_s": m_estimator, "ratio": ratio, "overhead_pct": 100 * (ratio - 1),
           "own_work_s": own, "own_work_pct_of_engine": 100 * own / m_engine,
           "first_call_engine_s": first_engine, "first_call_estimator_s": first_estimator, "fit_s": fit_s,
           "identical": same}
    where = f"{backend.name}, {X.shape[0]:,} docs, {Q.shape[0]:,} queries, k = {a.k}"
    report.row(where, "engine.search_topk median", f"{m_engine * 1e3:.1f} ms")
    report.row(where, "NearestNeighbors.kneighbors median", f"{m_estimator * 1e3:.1f} ms")
    report.row(where, "estimator / engine", f"{ratio:.3f}", "goal <= 1.05")
    report.row(where, "the estimator's own work (input checks, distances)", f"{own * 1e3:.2f} ms",
               f"{100 * own / m_engine:.2g}% of the engine's time")
    report.row(where, "identical results", same)
    report.row(where, "fit (index build, input checks)", f"{fit_s:.2f} s")
    return out


def main():
    a = options()
    report = harness.Report(a.out)
    from gputext.backend import resolve
    report.results["env"] = harness.probe(resolve(a.device))
    report.section("kneighbors_vs_search_topk", measure, a, report, timed=True)
    report.write("bench_estimators.json", report.rows_md(), "bench_estimators.md")
    result = report.results["kneighbors_vs_search_topk"]
    return 0 if isinstance(result, dict) and result.get("identical") else 1


if __name__ == "__main__":
    sys.exit(main())
