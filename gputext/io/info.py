"""`gputext corpus info`: what a corpus file holds and what it will cost on a device.

``corpus_info(path)`` reads the metadata, /X/indptr and the obs columns it reports on (labels,
qid, relevance), never /X/data or /X/indices, so it is quick on corpora larger than memory. It
checks the structure it reads (shape against indptr and the array lengths) and turns every
failure into one line naming the HDF5 key.

Device memory (bytes; what the GPU kernels keep resident, DESIGN.md):
    csr             nnz * (4 data float32 + 4 indices int32) + (n_docs + 1) * 8 indptr int64
    inverted_index  nnz * (4 doc id int32 + 4 weight float32) postings
                    + (n_terms + 1) * 8 posting offsets int64
                    + n_docs * 2 * 4 document norms (L2 and L1, float32)
The index figure is the layout of the GT-kNN inverted index (postings per term, CSC-like); a
scoring batch adds n_queries_in_batch * n_docs * 4 bytes of dense accumulators on top.
"""
from __future__ import annotations

import os

import h5py
import numpy as np

from ..errors import FormatError
from .commit import committed_length, read_committed
from .corpus import Categorical, damaged_file_errors, location, need_element, open_file, read_element
from .rows import csr_header_problems


def device_bytes(n_docs: int, n_terms: int, nnz: int) -> dict:
    csr = nnz * (4 + 4) + (n_docs + 1) * 8
    index = nnz * (4 + 4) + (n_terms + 1) * 8 + n_docs * 2 * 4
    return {"csr": int(csr), "inverted_index": int(index)}


def _scalar(value):
    if isinstance(value, np.ndarray):
        return [_scalar(v) for v in value.tolist()]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, dict):
        return {k: _scalar(v) for k, v in value.items()}
    return value


def _read_info(f: h5py.File, path: str) -> dict:
    if f.attrs.get("gputext-format") is None and f.attrs.get("encoding-type") is None:
        raise FormatError(f"{location(f, '')} has neither gputext-format nor anndata encoding-type attributes: "
                          "not a gputext corpus")
    problem = next(csr_header_problems(f), None)  # the readers' header checks (a CSC /X named as such)
    if problem is not None:
        raise FormatError(problem)
    g = f["X"]
    n_docs, n_terms = (int(s) for s in np.ravel(g.attrs["shape"]))
    indptr = read_committed(g["indptr"])  # an in-place update's uncommitted tail is not part of the file
    if indptr.ndim != 1 or len(indptr) != n_docs + 1:
        raise FormatError(f"{location(f, 'X/indptr')} has length {len(indptr)}, expected n_docs + 1 = {n_docs + 1}")
    if len(indptr) and (indptr[0] != 0 or np.any(np.diff(indptr) < 0)):
        raise FormatError(f"{location(f, 'X/indptr')} is not non-decreasing from 0")
    nnz = int(indptr[-1]) if len(indptr) else 0
    for part in ("data", "indices"):
        if g[part].ndim != 1 or committed_length(g[part]) != nnz:
            raise FormatError(f"{location(f, 'X/' + part)} has {g[part].shape[0]} entries, indptr[-1] says {nnz}")
    obs = need_element(f, "obs", h5py.Group)
    need_element(f, "var", h5py.Group)
    lengths = np.diff(indptr)
    out: dict = {
        "file": "<stdin>" if path == "-" else path,
        "file_bytes": os.path.getsize(path) if path != "-" else None,
        "n_docs": n_docs,
        "n_terms": n_terms,
        "nnz": nnz,
        "density": nnz / (n_docs * n_terms) if n_docs and n_terms else 0.0,
        "terms_per_doc": {"mean": float(lengths.mean()) if n_docs else 0.0,
                          "median": float(np.median(lengths)) if n_docs else 0.0,
                          "max": int(lengths.max()) if n_docs else 0},
        "n_empty_docs": int(np.count_nonzero(lengths == 0)),
        "device_bytes": device_bytes(n_docs, n_terms, nnz),
    }
    if "label" in obs:
        label = read_element(f, "obs/label")
        if isinstance(label, Categorical):
            if len(label.codes) != n_docs:
                raise FormatError(f"{location(f, 'obs/label/codes')} has {len(label.codes)} entries, expected {n_docs}")
            if len(label.codes) and (label.codes.min() < -1 or label.codes.max() >= len(label.categories)):
                raise FormatError(f"{location(f, 'obs/label/codes')} has codes outside the categories")
            counts = np.bincount(label.codes[label.codes >= 0], minlength=len(label.categories))
            out["labels"] = {"n_classes": int(len(label.categories)),
                             "counts": {str(c): int(n) for c, n in zip(label.categories, counts)},
                             "n_unlabelled": int(np.count_nonzero(label.codes < 0))}
    if "obsm" in f and "labels" in f["obsm"]:
        Y = read_element(f, "obsm/labels")
        names = (read_element(f, "uns/gputext/label_names") if "uns/gputext/label_names" in f
                 else np.array([str(j) for j in range(Y.shape[1])], dtype=object))
        per_label = np.bincount(Y.indices, minlength=Y.shape[1])
        out["multilabel"] = {"n_labels": int(Y.shape[1]),
                             "labels_per_doc": float(Y.nnz / n_docs) if n_docs else 0.0,
                             "counts": {str(c): int(n) for c, n in zip(names, per_label)}}
    if "qid" in obs:
        qid = np.asarray(read_element(f, "obs/qid"))
        uniq, sizes = np.unique(qid, return_counts=True)
        out["queries"] = {"n_queries": int(len(uniq)),
                          "docs_per_query": {"min": int(sizes.min()) if len(sizes) else 0,
                                             "median": float(np.median(sizes)) if len(sizes) else 0.0,
                                             "max": int(sizes.max()) if len(sizes) else 0}}
    if "relevance" in obs:
        rel = np.asarray(read_element(f, "obs/relevance"))
        levels, counts = np.unique(rel, return_counts=True)
        if len(levels) <= 32:
            out["relevance"] = {f"{lv:g}": int(n) for lv, n in zip(levels, counts)}
        else:
            out["relevance"] = {"min": float(rel.min()), "max": float(rel.max()), "n_levels": int(len(levels))}
    params = read_element(f, "uns/gputext") if "uns/gputext" in f else {}
    params = params if isinstance(params, dict) else {}
    out["weighting"] = _weighting(params, nnz)
    out["params"] = _scalar(params)
    return out


# uns/gputext keys of result files -> the command that wrote them
RESULT_KEYS = {"knn": "knn search", "classify": "knn classify", "metafeatures": "knn metafeatures",
               "stream": "cluster stream", "rank": "rank predict", "star": "cluster star"}


def _weighting(params: dict, nnz: int) -> str:
    """The stored weighting; for a result file whose /X is empty, what it is instead of 'unknown'."""
    if "weighting" in params:
        return str(params["weighting"])
    writer = next((cmd for key, cmd in RESULT_KEYS.items() if key in params), None)
    if writer and nnz == 0:
        return f"none (a result file of `{writer}`: /X holds no weights)"
    if writer:
        return f"as its source corpus (a result file of `{writer}`)"
    return "unknown (not recorded by the file's writer)"


def corpus_info(path: str) -> dict:
    """A JSON-ready summary of the corpus at ``path`` (see the module docstring)."""
    with open_file(path) as f, damaged_file_errors(f.gputext_label):
        return _read_info(f, path)


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_info(summary: dict, max_classes: int = 30) -> str:
    """Human-readable lines for the terminal."""
    s = summary
    p = s.get("params", {})
    tpd = s["terms_per_doc"]
    lines = [
        f"file        {s['file']} ({_human(s['file_bytes'])})",
        f"documents   {s['n_docs']:,} ({s['n_empty_docs']:,} empty)",
        f"terms       {s['n_terms']:,}",
        f"nnz         {s['nnz']:,} (density {s['density']:.3g}; terms a document: mean {tpd['mean']:.1f}, "
        f"median {tpd['median']:g}, max {tpd['max']:,})",
        f"weighting   {s['weighting']}" + (f" (format {p['format']}, stopwords {p.get('stopwords', '-')}, "
                                           f"min_df {p.get('min_df', '-')}, max_df {p.get('max_df', '-')})"
                                           if "format" in p else ""),
    ]
    if p.get("vocab_from"):
        lines.append(f"vocabulary  from {p['vocab_from']} ({p.get('n_oov', 0):,} out-of-vocabulary occurrences, "
                     f"{p.get('n_oov_terms', 0):,} distinct terms dropped)")
    if "labels" in s:
        lab = s["labels"]
        lines.append(f"labels      {lab['n_classes']} classes" +
                     (f", {lab['n_unlabelled']:,} unlabelled" if lab["n_unlabelled"] else ""))
        items = list(lab["counts"].items())
        for name, n in items[:max_classes]:
            lines.append(f"  {n:>9,}  {name}")
        if len(items) > max_classes:
            lines.append(f"  ... {len(items) - max_classes} more classes (--json lists all)")
    if "multilabel" in s:
        ml = s["multilabel"]
        lines.append(f"multi-label {ml['n_labels']} labels, {ml['labels_per_doc']:.2f} a document")
    if "queries" in s:
        q = s["queries"]
        d = q["docs_per_query"]
        lines.append(f"queries     {q['n_queries']:,} (documents a query: min {d['min']}, median {d['median']:g}, "
                     f"max {d['max']})")
    if "relevance" in s:
        lines.append("relevance   " + ", ".join(f"{k}: {v:,}" for k, v in s["relevance"].items()))
    dev = s["device_bytes"]
    lines.append(f"device      CSR {_human(dev['csr'])}, inverted index {_human(dev['inverted_index'])}")
    return "\n".join(lines)
