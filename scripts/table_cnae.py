#!/usr/bin/env python
"""Reproduce the CNAE paper's Table 1 / Figure 9: time to categorise one document vs training size.

Following the paper's method (section 5): one document d_j is held out; the rest is cut into 10
equal parts; training set i is the first i parts (|TV| = 10%, 20%, ..., 100%). For each |TV| we
time the multi-label k-NN categorisation of d_j (k = 30 cosine neighbours, then the category
ranking f(d_j, c) = max similarity to a neighbour labelled c), averaged over 100 runs, with:

  sequential CPU   our exact CPU twin on one thread (numba.set_num_threads(1))
  CPU twin         the same on every core
  dense kernel     our CUDA dense search (the paper's block-strided matrix-vector product + exact
                   top-k), training matrix resident on the GPU, query copy and result copy included
  cuBLAS           CuPy: query copy, cuBLAS gemv (X @ q), division by the norms, top-k
                   (argpartition + sort of k), result copy

on two corpora: CNAE-9 (UCI, 1,080 x 856, 9 classes; built with gputext.io.ingest) and a
synthetic corpus of the paper's size (6,911 documents x 3,764 terms, 105 classes, CNAE-9's
density). The paper's own figures (GTX 285, 2009) are printed beside ours for reference.
Without a GPU only the CPU rows run.

    python scripts/table_cnae.py [--datasets DIR] [--out out/knn_classify] [--repeats 100] [--quick]

Writes OUT/table_cnae.md, OUT/table_cnae.json and OUT/table_cnae.png (speed-up over sequential).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

K = 30
# the paper's Table 1: |TV|, sequential (s), CUBLAS (s), speed-up CUBLAS, our algorithm (s), speed-up
PAPER = [(691, 0.02096, 0.00069, 30.2, 0.00047, 44.3), (1382, 0.04159, 0.00119, 34.9, 0.00078, 53.3),
         (2073, 0.06259, 0.00167, 37.5, 0.00107, 58.5), (2764, 0.08305, 0.00168, 49.3, 0.00133, 62.3),
         (3455, 0.10067, 0.00218, 46.2, 0.00163, 61.7), (4146, 0.11825, 0.00266, 44.5, 0.00190, 62.1),
         (4837, 0.13787, 0.00313, 44.1, 0.00219, 63.1), (5528, 0.15758, 0.00317, 49.8, 0.00250, 63.0),
         (6219, 0.17719, 0.00364, 48.7, 0.00274, 64.6), (6910, 0.19602, 0.00413, 47.5, 0.00302, 64.8)]


def cnae9(ddir: Path, cache: Path):
    from gputext.io import read_corpus, write_corpus
    from gputext.io.ingest import build_corpus
    path = cache / "cnae9-all.h5"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_corpus(build_corpus([str(ddir / "cnae9" / "CNAE-9.data")], weighting="tfidf"), str(path))
    c = read_corpus(str(path))
    return c.X, np.asarray(c.labels.codes), len(c.labels.categories)


def paper_sized(seed: int = 0, n_docs: int = 6911, n_terms: int = 3764, n_classes: int = 105, density: float = 0.0078):
    """Synthetic tf-idf-like corpus of the paper's shape: each class favours its own terms."""
    rng = np.random.default_rng(seed)
    y = np.arange(n_docs) % n_classes
    per_doc = max(1, int(round(density * n_terms)))
    rows, cols = [], []
    class_terms = rng.integers(0, n_terms, (n_classes, 60))
    for i in range(n_docs):
        own = rng.choice(class_terms[y[i]], size=per_doc // 2 + 1)
        other = rng.integers(0, n_terms, per_doc - per_doc // 2)
        t = np.unique(np.concatenate([own, other]))
        rows += [i] * t.size
        cols += t.tolist()
    X = sp.csr_matrix((rng.random(len(rows)).astype(np.float32) + 0.1, (rows, cols)), shape=(n_docs, n_terms))
    n = np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel())
    X = sp.csr_matrix(sp.diags(1 / n) @ X, dtype=np.float32)
    return X, y, n_classes


def categorise(indices, scores, Y):
    from gputext.knn.classify import category_ranking
    return category_ranking(indices, scores, Y)


def time_calls(fn, repeats: int) -> float:
    fn()  # warm-up (compilation, allocations)
    fn()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t) / repeats


def run_dataset(name, X, y, n_classes, args, has_gpu) -> list[dict]:
    import numba

    from gputext.knn.dense import DenseIndex
    from gputext.knn.multilabel import codes_to_indicator

    rng = np.random.default_rng(0)
    held = int(rng.integers(X.shape[0]))
    rest = np.setdiff1d(np.arange(X.shape[0]), [held])
    rest = rest[rng.permutation(rest.size)]
    parts = np.array_split(rest, 10)
    q = X[held]
    steps = range(1, 11) if not args.quick else (1, 5, 10)
    rows = []
    all_threads = numba.get_num_threads()
    for i in steps:
        tv = np.concatenate(parts[:i])
        Xtv = X[tv]
        Y = codes_to_indicator(y[tv], n_classes)
        k = min(K, tv.size)
        row = {"dataset": name, "train_docs": int(tv.size), "n_terms": int(X.shape[1])}
        cpu = DenseIndex(Xtv, "cpu")
        numba.set_num_threads(1)
        row["sequential_s"] = time_calls(lambda: categorise(*cpu.search(q, k), Y), args.repeats)
        numba.set_num_threads(all_threads)
        row["cpu_twin_s"] = time_calls(lambda: categorise(*cpu.search(q, k), Y), args.repeats)
        want = cpu.search(q, k)
        if has_gpu:
            gpu = DenseIndex(Xtv, "cuda")
            got = gpu.search(q, k)
            row["dense_equals_cpu"] = bool(np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]))
            row["dense_kernel_s"] = time_calls(lambda: categorise(*gpu.search(q, k), Y), args.repeats)
            try:
                import cupy as cp
                Xd = cp.asarray(Xtv.toarray())
                norms = cp.sqrt((Xd * Xd).sum(axis=1))
                inv = cp.where(norms > 0, 1 / cp.where(norms > 0, norms, 1), 0)
                qh = np.ascontiguousarray(q.toarray()[0])

                def cublas():
                    qd = cp.asarray(qh)
                    s = (Xd @ qd) * inv / max(float(np.linalg.norm(qh)), 1e-30)
                    top = cp.argpartition(-s, k - 1)[:k] if k < s.size else cp.arange(s.size)
                    order = top[cp.argsort(-s[top], kind="stable")]
                    return categorise(cp.asnumpy(order)[None, :].astype(np.int32), cp.asnumpy(s[order])[None, :], Y)

                row["cublas_s"] = time_calls(cublas, args.repeats)
            except ImportError:
                row["cublas_s"] = None
        for key in ("cpu_twin_s", "dense_kernel_s", "cublas_s"):
            if row.get(key):
                row[key.replace("_s", "_speedup")] = row["sequential_s"] / row[key]
        rows.append(row)
        harness.log(str(row))
    return rows


def plot(rows, path: Path):
    with harness.figure(str(path), size=(7, 4.5)) as (fig, axes):
        ax = axes[0, 0]
        for name in dict.fromkeys(r["dataset"] for r in rows):
            rs = [r for r in rows if r["dataset"] == name]
            x = [r["train_docs"] for r in rs]
            for key, style, label in (("dense_kernel_speedup", "o-", "our dense kernel"), ("cublas_speedup", "s-", "cuBLAS (CuPy)"),
                                      ("cpu_twin_speedup", "^-", "CPU twin, all cores")):
                if all(r.get(key) for r in rs):
                    ax.plot(x, [r[key] for r in rs], style, label=f"{label}, {name}")
        ax.plot([p[0] for p in PAPER], [p[5] for p in PAPER], "k--", label="paper: their kernel (GTX 285)")
        ax.plot([p[0] for p in PAPER], [p[3] for p in PAPER], "k:", label="paper: CUBLAS (GTX 285)")
        harness.style(ax, "Categorising one document (k = 30, multi-label category ranking)", "training documents |TV|",
                      "speed-up over sequential CPU", legend=7)


def report(rows, out: Path, args, device):
    def f(v, spec):
        return "n/a" if v is None else format(v, spec)
    env = harness.probe()
    lines = [f"# CNAE paper, Table 1: time to categorise one document ({time.strftime('%Y-%m-%d %H:%M')})", "",
             f"Host: {env['host']}, {env['cpu_count']} CPU cores; device: {device}; mean of {args.repeats} runs; "
             "times include the query copy to the GPU and the result copy back.", "",
             "| corpus | terms | \\|TV\\| | sequential (ms) | CPU twin (ms) | dense kernel (ms) | speed-up | cuBLAS (ms) | speed-up | dense = CPU |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ms = lambda key: f(r.get(key) * 1e3 if r.get(key) else None, ".3f")  # noqa: E731
        lines.append(f"| {r['dataset']} | {r['n_terms']} | {r['train_docs']} | {ms('sequential_s')} | {ms('cpu_twin_s')} | "
                     f"{ms('dense_kernel_s')} | {f(r.get('dense_kernel_speedup'), '.1f')} | {ms('cublas_s')} | "
                     f"{f(r.get('cublas_speedup'), '.1f')} | {r.get('dense_equals_cpu', 'n/a')} |")
    lines += ["", "The paper (GTX 285 vs Athlon 64 X2, 6,910 x 3,764, 105 classes): speed-up 44.3 (691 documents) "
              "to 64.8 (6,910) for their kernel, 30.2 to 47.5 for CUBLAS.", "", "![speed-up](table_cnae.png)"]
    harness.Report(str(out), {"rows": rows, "paper": PAPER, "repeats": args.repeats, "env": env}).write(
        "table_cnae.json", "\n".join(lines) + "\n", md_name="table_cnae.md")


def main():
    ap = harness.parser(__doc__, quick="3 training sizes, 10 repeats", out=os.environ.get("OUT") and os.path.join(
        os.environ["OUT"], "knn_classify") or "out/knn_classify")
    ap.add_argument("--datasets")
    ap.add_argument("--repeats", type=int, default=100)
    args = ap.parse_args()
    if args.quick:
        args.repeats = min(args.repeats, 10)
    from gputext.backend import resolve
    backend = resolve(args.device)
    has_gpu = backend.is_cuda and not backend.simulator
    print(f"device: {backend.describe()}" + ("" if has_gpu else "  (no GPU: CPU rows only)"), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ddir = harness.datasets(args.datasets)
    if ddir is None:
        sys.exit("datasets not found: give --datasets DIR (the folder with cnae9/)")
    rows = run_dataset("CNAE-9", *cnae9(ddir, out / "corpora"), args, has_gpu)
    rows += run_dataset("paper-sized synthetic", *paper_sized(), args, has_gpu)
    plot(rows, out / "table_cnae.png")
    report(rows, out, args, backend.describe())


if __name__ == "__main__":
    main()
