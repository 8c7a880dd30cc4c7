"""Corpora and results out of gputext: svmlight, SciPy .npz (+ labels file), and plain tables
(CSV, JSONL, Parquet) of per-document results.

    from gputext.io.export import export_corpus, write_neighbour_table
    export_corpus("train.h5", "svmlight", "train.svm")      # `gputext corpus export train.h5 --to svmlight -o train.svm`
    write_neighbour_table(result, "nn.csv", neighbour_ids)   # `gputext knn search ... -o nn.csv`

Decisions:
- svmlight: one line per document, "<target> [qid:<q>] <j+1>:<w> ..." (1-based feature numbers,
  as `corpus build` reads them back). The target is obs/relevance when present, else the labels
  (multi-label: comma-separated; an unlabelled document gets 0), else 0. Numeric labels are
  written as they are; other names are numbered 1, 2, ... in sorted order and listed on a first
  line "# gputext-labels: [names as JSON]", which `corpus build` reads to restore them (targets
  like "c3" or with a "#" would not read back).
- npz: the matrix by scipy.sparse.save_npz (CSR float32); when the corpus is labelled, the
  labels go to a text file beside it, one line per document (multi-label: comma-separated; empty
  line: no label), named OUTPUT with ".labels.txt" in place of ".npz": what
  `corpus build OUTPUT --labels OUTPUT.labels.txt` reads back (a label name with a comma is
  refused; an unlabelled corpus removes an earlier export's labels file). Terms are not stored (columns are
  positions).
- csv (corpus export) and the tables: one row per document: its id, every obs column (category
  names for categoricals), and every 1- or 2-D dense obsm array as columns name_1 .. name_m.
  The matrix X does not go into a table (use svmlight or npz for it).
- Neighbour tables (knn search -o nn.csv|.jsonl|.parquet): id, then the neighbours' document ids
  and scores: CSV columns neighbor_1..k, score_1..k (empty where a query has fewer than k);
  JSONL {"id", "neighbors": [...], "scores": [...]}; Parquet the same as list columns (needs
  pyarrow, optional: a clear error without it).
All outputs are written to a temporary name and renamed (atomic_output), '-' is stdout for text.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import sys

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from ..progress import warn
from .corpus import Categorical, Corpus, atomic_output

EXPORT_FORMATS = ("svmlight", "npz", "csv")
LABELS_HEADER = "# gputext-labels: "  # svmlight: the label names of numbered targets (JSON list; 1 is the first)
_NUMERIC = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
TABLE_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}


def table_format(path: str) -> str | None:
    """'csv' | 'jsonl' | 'parquet' for an output path with that extension, else None (HDF5)."""
    return TABLE_SUFFIXES.get(os.path.splitext(str(path))[1].lower())


def labels_path(npz_path: str) -> str:
    """The labels file written beside an exported .npz."""
    stem = npz_path[:-4] if npz_path.lower().endswith(".npz") else npz_path
    return stem + ".labels.txt"


def label_strings(corpus: Corpus) -> list[str] | None:
    """One string per document: its label(s) comma-separated ('' for none); None when unlabelled."""
    Y = corpus.label_matrix
    if Y is not None:
        names = np.asarray(corpus.params.get("label_names", [str(j) for j in range(Y.shape[1])]), dtype=object)
        Y = sp.csr_matrix(Y)
        return [",".join(str(names[j]) for j in Y.indices[Y.indptr[i]:Y.indptr[i + 1]]) for i in range(Y.shape[0])]
    if corpus.labels is None:
        return None
    return ["" if v is None else str(v) for v in corpus.labels.values()]


def obs_table(corpus: Corpus) -> dict[str, list]:
    """Columns (name -> per-document values) of a corpus's id, obs and dense obsm arrays."""
    columns: dict[str, list] = {"id": [str(v) for v in corpus.doc_ids]}
    for name, value in corpus.obs.items():
        if isinstance(value, Categorical):
            columns[name] = ["" if v is None else str(v) for v in value.values()]
        else:
            columns[name] = np.asarray(value).tolist()
    for name, value in corpus.obsm.items():
        if sp.issparse(value):
            continue
        value = np.asarray(value)
        if value.ndim == 1:
            columns[name] = value.tolist()
        elif value.ndim == 2:
            for j in range(value.shape[1]):
                columns[f"{name}_{j + 1}"] = value[:, j].tolist()
    return columns


def _write_text(path: str, render) -> None:
    """render(file) writes text; '-' is stdout, else atomically."""
    if path == "-":
        render(sys.stdout)
        sys.stdout.flush()
        return
    with atomic_output(path, suffix=os.path.splitext(path)[1]) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            render(fh)


def _cell(v):
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    return v


def write_csv(columns: dict[str, list], path: str) -> None:
    names = list(columns)
    n = len(next(iter(columns.values()))) if columns else 0

    def render(fh):
        w = csv.writer(fh)
        w.writerow(names)
        for i in range(n):
            w.writerow([_cell(columns[c][i]) for c in names])
    _write_text(path, render)


def write_jsonl(rows, path: str) -> None:
    def render(fh):
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    _write_text(path, render)


def write_parquet(columns: dict[str, list], path: str) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: writing Parquet needs pyarrow (pip install pyarrow); "
                         "or use .csv or .jsonl") from None
    if path == "-":
        raise InputError("Parquet output needs a file name, not - (stdout)")
    table = pa.table(columns)
    with atomic_output(path, suffix=".parquet") as tmp:
        pq.write_table(table, tmp)


def write_table(columns: dict[str, list], path: str, fmt: str | None = None) -> None:
    """Write per-document columns as CSV, JSONL (one object per row) or Parquet, by ``fmt`` or the extension."""
    fmt = fmt or table_format(path) or "csv"
    if fmt == "csv":
        write_csv(columns, path)
    elif fmt == "jsonl":
        names = list(columns)
        n = len(columns[names[0]]) if names else 0
        write_jsonl(({c: _json_value(columns[c][i]) for c in names} for i in range(n)), path)
    elif fmt == "parquet":
        write_parquet(columns, path)
    else:
        raise InputError(f"unknown table format {fmt!r}: expected csv, jsonl or parquet")


def _json_value(v):
    if isinstance(v, float) and not np.isfinite(v):
        return None
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    return v


def neighbour_columns(result: Corpus, neighbour_ids) -> dict[str, list]:
    """id, neighbors (lists of document ids) and scores (lists) of a knn search result; a query
    with fewer than k neighbours has shorter lists."""
    idx = np.asarray(result.obsm["knn_indices"])
    scores = np.asarray(result.obsm["knn_scores"], np.float64)
    ids = np.asarray(neighbour_ids, dtype=object)
    neighbours, values = [], []
    for row, srow in zip(idx, scores):
        ok = row >= 0
        neighbours.append([str(v) for v in ids[row[ok]]])
        values.append(srow[ok].tolist())
    return {"id": [str(v) for v in result.doc_ids], "neighbors": neighbours, "scores": values}


def write_neighbour_table(result: Corpus, path: str, neighbour_ids, fmt: str | None = None) -> None:
    """One row per query of a knn search result (module docstring), by the path's extension."""
    fmt = fmt or table_format(path) or "csv"
    cols = neighbour_columns(result, neighbour_ids)
    if fmt == "csv":
        k = result.obsm["knn_indices"].shape[1]
        wide: dict[str, list] = {"id": cols["id"]}
        for j in range(k):
            wide[f"neighbor_{j + 1}"] = [n[j] if j < len(n) else "" for n in cols["neighbors"]]
        for j in range(k):
            wide[f"score_{j + 1}"] = [s[j] if j < len(s) else "" for s in cols["scores"]]
        write_csv(wide, path)
    else:
        write_table(cols, path, fmt)


def read_doc_ids(path: str) -> np.ndarray:
    """The document ids (/obs index) of a corpus or index file, without reading its matrix."""
    import h5py
    with h5py.File(path, "r") as f:
        obs = f["obs"]
        key = obs.attrs.get("_index", "_index")
        key = key.decode() if isinstance(key, bytes) else str(key)
        values = obs[key][()]
    return np.array([v.decode() if isinstance(v, bytes) else str(v) for v in values], dtype=object)


def _numbered_labels(labels: list[str] | None) -> tuple[list[str] | None, list[str]]:
    """Labels as svmlight targets: numbers as they are; otherwise each label's 1-based position in
    the sorted names, the names listed on a first comment line (LABELS_HEADER) that `corpus build`
    reads back. Returns (targets or None, header lines)."""
    if labels is None or all(_NUMERIC.match(v) for v in labels if v):
        return labels, []
    names = sorted({p for v in labels for p in v.split(",") if p})
    number = {name: str(k + 1) for k, name in enumerate(names)}
    targets = [",".join(number[p] for p in v.split(",") if p) for v in labels]
    return targets, [LABELS_HEADER + json.dumps(names, ensure_ascii=False)]


def svmlight_lines(corpus: Corpus):
    """The svmlight lines of a corpus (module docstring), one per document, without newlines."""
    X = sp.csr_matrix(corpus.X)
    relevance = corpus.obs.get("relevance")
    labels, header = _numbered_labels(label_strings(corpus) if relevance is None else None)
    yield from header
    qid = corpus.obs.get("qid")
    for i in range(X.shape[0]):
        if relevance is not None:
            target = repr(float(relevance[i])).removesuffix(".0")
        elif labels is not None and labels[i]:
            target = labels[i]
        else:
            target = "0"
        lo, hi = X.indptr[i], X.indptr[i + 1]
        pairs = " ".join(f"{j + 1}:{float(v)!r}" for j, v in zip(X.indices[lo:hi], X.data[lo:hi]))
        head = target if qid is None else f"{target} qid:{int(qid[i])}"
        yield f"{head} {pairs}".rstrip()


def _check_label_names(corpus: Corpus, where: str) -> None:
    """Refuse label names that the one-line-per-document labels file cannot hold: a comma (it
    separates a document's labels), a line break."""
    names = corpus.params.get("label_names") if corpus.label_matrix is not None else (
        corpus.labels.categories if corpus.labels is not None else [])
    for name in names if names is not None else []:
        if any(c in str(name) for c in ",\n\r"):
            raise InputError(f"the label {str(name)!r} holds a comma or a line break, which {where} uses between "
                             "labels and documents: rename it first")


def export_corpus(corpus: Corpus, to: str, output: str) -> list[str]:
    """Write ``corpus`` as svmlight, npz (+ labels file) or csv; returns the paths written."""
    if to not in EXPORT_FORMATS:
        raise InputError(f"--to {to!r}: expected one of {', '.join(EXPORT_FORMATS)}")
    if to == "svmlight":
        _write_text(output, lambda fh: fh.writelines(line + "\n" for line in svmlight_lines(corpus)))
        return [output]
    if to == "csv":
        write_csv(obs_table(corpus), output)
        return [output]
    if output == "-":
        raise InputError("--to npz needs a file name (-o FILE.npz), not - (stdout)")
    _check_label_names(corpus, "the labels file")
    buffer = io.BytesIO()
    sp.save_npz(buffer, sp.csr_matrix(corpus.X), compressed=True)
    with atomic_output(output, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            fh.write(buffer.getvalue())
    written = [output]
    labels = label_strings(corpus)
    if labels is not None:
        _write_text(labels_path(output), lambda fh: fh.writelines(v + "\n" for v in labels))
        written.append(labels_path(output))
    elif os.path.isfile(labels_path(output)):  # an earlier export's labels would be read with this matrix
        os.unlink(labels_path(output))
        warn(f"removed {labels_path(output)}: the labels of an earlier {output} (this corpus has none)")
    return written
