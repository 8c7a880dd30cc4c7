"""Input, weighting, checkpoints and output of `gputext cluster stream`.

    from gputext.cluster.stream_io import cluster_corpus, cluster_jsonl

    summary = cluster_corpus("corpus.h5", "clusters.h5", threshold=0.6, max_terms=35)
    summary = cluster_jsonl(sys.stdin, sys.stdout, idf_from="ref.h5", state="state.h5")

Decisions (docs/stream.md):

- Corpus input: the rows of /X are the document vectors as stored (build the corpus with
  ``--weighting tficf`` for the paper's setting), read in chunks, clustered in row order.
- JSONL input (``-``): one object a line, ``{"id": ..., "text": ...}`` (``id`` optional: the
  position in the stream). Text is tokenised with gputext.io.tokenize (lowercase, letters and
  digits), stopwords removed (``english`` by default, as ``corpus build``).
  * ``--idf-from REF.h5`` fixes the vocabulary (other tokens are dropped) and weights with
    tf-icf against REF's df and N exactly as ``corpus build --weighting tficf --vocab-from REF.h5``:
    log(1 + tf) * log((N + 1) / (df + 1)), rows scaled to unit L2 norm.
  * without it the vocabulary grows and the statistics are "updated as they go": N and df count
    the documents seen so far *including the current one*, and the weight is Reed et al.'s
    tf-icf log(1 + tf) * log(1 + N / df), unit L2 rows (log(1 + N/df) is never 0, so the first
    documents are not empty). A document's weights are fixed when it arrives.
- One output line per document as soon as it is decided: ``{"id", "cluster", "similarity",
  "new"}`` (similarity = the best similarity found, compared with the threshold; cluster -1 for a
  document with no known term).
- ``--state FILE.h5``: loaded when it exists (the stream continues), written atomically at the
  end of input, every ``checkpoint_every`` documents, and when SIGINT/SIGTERM stops the stream
  (at a batch boundary: every document whose line was written is in the state, no other).
"""
from __future__ import annotations

import json
import math
import os
import select
import signal
import time
from collections import Counter
from contextlib import contextmanager

import h5py
import numpy as np
import scipy.sparse as sp

from .. import __version__
from ..backend import Backend
from ..errors import FormatError, InputError
from ..io import Corpus, atomic_output, write_corpus
from ..io.h5file import h5_output
from ..io.readers import json_text_record
from ..io.rows import CorpusRows
from ..io.tokenize import load_stopwords, tokenize
from ..io.weighting import Reference, apply_weighting, document_frequency
from ..progress import info, progress
from .stream import StreamClusterer

STATE_FORMAT = "gputext-stream-state"
STATE_VERSION = "1"
MODES = ("corpus", "idf-from", "as-it-goes")
CHUNK_DOCS = 65536


# ----------------------------------------------------------------------------- weighting of text

class StreamWeighter:
    """Turns texts into tf-icf rows (module docstring) and carries the vocabulary statistics."""

    def __init__(self, mode: str, terms=None, df=None, n_docs: int = 0, stopwords: str = "english"):
        if mode not in ("idf-from", "as-it-goes"):
            raise ValueError(mode)
        self.mode = mode
        self.stopwords_spec = stopwords
        self.stopwords = load_stopwords(stopwords)
        self.terms: list[str] = [str(t) for t in (terms if terms is not None else [])]
        self.vocabulary = {t: j for j, t in enumerate(self.terms)}
        if len(self.vocabulary) != len(self.terms):
            raise InputError("the reference vocabulary has duplicate terms")
        self.df = np.zeros(max(len(self.terms), 16), np.int64)
        if df is not None:
            self.df[:len(self.terms)] = np.asarray(df, np.int64)
        self.n_docs = int(n_docs)

    @classmethod
    def from_reference(cls, path: str, stopwords: str = "english") -> "StreamWeighter":
        """--idf-from: REF's terms, var/df (or df of its rows) and uns/gputext/idf_n_docs (or its n_docs)."""
        from ..io import read_corpus
        ref = read_corpus(path)
        df = np.asarray(ref.var["df"], np.int64) if "df" in ref.var else document_frequency(ref.X)
        n_ref = int(ref.params.get("idf_n_docs", ref.n_docs))
        return cls("idf-from", ref.terms, df, n_ref, stopwords)

    @property
    def n_terms(self) -> int:
        return len(self.terms)

    def weigh(self, texts: list[str]) -> sp.csr_matrix:
        """(len(texts), n_terms) float64 CSR of tf-icf weights, sorted indices."""
        rows, cols, vals = [], [], []
        for i, text in enumerate(texts):
            counter = Counter(tokenize(text))
            for word in self.stopwords.intersection(counter):
                del counter[word]
            ids, tfs = [], []
            for word, tf in counter.items():
                j = self.vocabulary.get(word)
                if j is None:
                    if self.mode == "idf-from":
                        continue
                    j = self._add_term(word)
                ids.append(j)
                tfs.append(tf)
            ids = np.asarray(ids, np.int64)
            tfs = np.asarray(tfs, np.float64)
            if self.mode == "as-it-goes":
                self.n_docs += 1
                self.df[ids] += 1
                w = np.log1p(tfs) * np.log1p(self.n_docs / self.df[ids].astype(np.float64))
                norm = math.sqrt(float(np.dot(w, w))) if len(w) else 0.0
                if norm > 0:
                    w = w / norm
            else:
                w = tfs
            rows.append(np.full(len(ids), i, np.int64))
            cols.append(ids)
            vals.append(w)
        n = len(texts)
        X = sp.csr_matrix((np.concatenate(vals) if vals else np.zeros(0), (np.concatenate(rows) if rows else np.zeros(0, np.int64),
                           np.concatenate(cols) if cols else np.zeros(0, np.int64))), shape=(n, self.n_terms))
        X.sort_indices()
        if self.mode == "idf-from":
            X = apply_weighting(X, "tficf", Reference(self.df[:self.n_terms], self.n_docs)).astype(np.float64)
        return X

    def _add_term(self, word: str) -> int:
        j = len(self.terms)
        self.terms.append(word)
        self.vocabulary[word] = j
        if j >= len(self.df):
            df = np.zeros(2 * len(self.df), np.int64)
            df[:len(self.df)] = self.df
            self.df = df
        return j


# ----------------------------------------------------------------------------- checkpoints

def save_state(path: str, clusterer: StreamClusterer, mode: str, terms, weighter: StreamWeighter | None = None,
               extra: dict | None = None) -> None:
    """Write the cluster state (and the stream's vocabulary statistics) atomically to an HDF5 file."""
    state = clusterer.state_arrays()
    str_dtype = h5py.string_dtype("utf-8")
    with atomic_output(path) as tmp:
        with h5_output(tmp, "w") as f:
            f.attrs["gputext-format"] = STATE_FORMAT
            f.attrs["gputext-format-version"] = STATE_VERSION
            f.attrs["gputext-version"] = __version__
            f.attrs["mode"] = mode
            f.attrs["threshold"] = clusterer.threshold
            f.attrs["max_terms"] = clusterer.K
            f.attrs["n_docs_seen"] = clusterer.n_docs_seen
            f.attrs["n_clusters"] = clusterer.n_clusters
            for key, value in (extra or {}).items():
                f.attrs[key] = value
            for key in ("ell_terms", "ell_weights", "magnitude", "size"):
                f.create_dataset(key, data=state[key])
            f.create_dataset("vocabulary", data=np.asarray([str(t) for t in terms], dtype=object), dtype=str_dtype)
            if weighter is not None:
                f.create_dataset("df", data=weighter.df[:weighter.n_terms])
                f.attrs["reference_n_docs"] = weighter.n_docs
                f.attrs["stopwords"] = weighter.stopwords_spec


def load_state(path: str) -> dict:
    """Read a state file written by save_state; every problem is one line naming the key."""
    if not os.path.exists(path):
        raise InputError(f"--state {path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError:
        raise FormatError(f"--state {path}: not a readable HDF5 file") from None
    with f:
        if f.attrs.get("gputext-format") != STATE_FORMAT:
            raise FormatError(f"--state {path}: not a stream-clustering state file (attribute gputext-format is "
                              f"{f.attrs.get('gputext-format')!r}, expected {STATE_FORMAT!r})")
        out = {key: f.attrs[key] for key in f.attrs}
        for key in ("ell_terms", "ell_weights", "magnitude", "size", "vocabulary"):
            if key not in f:
                raise FormatError(f"--state {path}: /{key} is missing")
            out[key] = f[key][()]
        out["vocabulary"] = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in out["vocabulary"]],
                                     dtype=object)
        if "df" in f:
            out["df"] = f["df"][()]
    K, n = out["ell_terms"].shape if out["ell_terms"].ndim == 2 else (None, None)
    if K != int(out["max_terms"]) or out["ell_weights"].shape != (K, n) or len(out["magnitude"]) != n \
            or len(out["size"]) != n:
        raise FormatError(f"--state {path}: /ell_terms, /ell_weights, /magnitude and /size do not agree "
                          f"with max_terms = {out['max_terms']}")
    for key in ("mode", "stopwords"):
        if isinstance(out.get(key), bytes):
            out[key] = out[key].decode()
    return out


DEFAULT_THRESHOLD, DEFAULT_MAX_TERMS = 0.6, 35


def resolve_params(saved: dict | None, threshold, max_terms, state_path) -> tuple[float, int]:
    """T and K: as given, else the state file's, else the defaults; given ones must match the state."""
    if saved is None:
        return (DEFAULT_THRESHOLD if threshold is None else float(threshold),
                DEFAULT_MAX_TERMS if max_terms is None else int(max_terms))
    t_saved, k_saved = float(saved["threshold"]), int(saved["max_terms"])
    if (threshold is not None and float(threshold) != t_saved) or (max_terms is not None and int(max_terms) != k_saved):
        raise InputError(f"--state {state_path} has threshold {t_saved} and max_terms {k_saved}, but this run asks for "
                         f"threshold {threshold if threshold is not None else t_saved} and max_terms "
                         f"{max_terms if max_terms is not None else k_saved}: a stream keeps its parameters")
    return t_saved, k_saved


def _resume(saved: dict | None, state_path: str | None, clusterer: StreamClusterer, mode: str, terms) -> dict | None:
    """Load a saved state into the clusterer; check it fits this run."""
    if saved is None:
        return None
    if saved["mode"] != mode:
        raise InputError(f"--state {state_path} was written by a {saved['mode']} stream, this run is {mode}")
    if terms is not None and (len(saved["vocabulary"]) != len(terms)
                              or not np.array_equal(saved["vocabulary"], np.asarray(terms, dtype=object))):
        raise InputError(f"--state {state_path}: its vocabulary ({len(saved['vocabulary'])} terms) differs from this "
                         f"run's ({len(terms)} terms)")
    clusterer.restore(saved)
    return saved


# ----------------------------------------------------------------------------- summaries

def summary_line(result_docs: int, n_clusters: int, seconds: float, latencies: np.ndarray, backend: Backend,
                 device_bytes: int) -> str:
    p = np.percentile(latencies, [50, 95, 99]) * 1e3 if len(latencies) else np.zeros(3)
    rate = result_docs / seconds if seconds > 0 else float("inf")
    mem = f"; device memory {device_bytes / 2**20:.1f} MiB" if backend.is_cuda else ""
    return (f"clustered {result_docs} documents into {n_clusters} clusters in {seconds:.3f} s "
            f"({rate:,.0f} documents/s) on {backend.name}; latency per document p50 {p[0]:.3f} ms, "
            f"p95 {p[1]:.3f} ms, p99 {p[2]:.3f} ms{mem}")


def _stats_dict(sc: StreamClusterer, n_docs: int, seconds: float, latencies: np.ndarray) -> dict:
    p = np.percentile(latencies, [50, 95, 99]) * 1e3 if len(latencies) else np.zeros(3)
    st = sc.stats
    return {"n_docs": int(n_docs), "seconds": float(seconds),
            "docs_per_second": float(n_docs / seconds) if seconds > 0 else 0.0,
            "latency_ms_p50": float(p[0]), "latency_ms_p95": float(p[1]), "latency_ms_p99": float(p[2]),
            "launches": st.launches, "scan_launches": st.scan_launches, "index_launches": st.index_launches,
            "restarts": st.restarts, "device_bytes": int(sc.device_bytes())}


# ----------------------------------------------------------------------------- corpus input

def cluster_corpus(path: str, output: str, threshold: float | None = None, max_terms: int | None = None,
                   device: str = "auto",
                   batch_size: int | None = None, candidates: str = "auto", state: str | None = None,
                   quiet: bool = True, backend: Backend | None = None, chunk_docs: int = CHUNK_DOCS,
                   **clusterer_options) -> dict:
    """Cluster a corpus file's rows in order and write the result file ``output``.

    Result (a corpus file, DESIGN.md): /X an empty (nnz 0) matrix of the input's shape, /var the
    input's terms, /obs doc ids with columns ``cluster`` int32, ``similarity`` float64,
    ``new_cluster`` bool and the input's ``label`` when it has one; /uns/gputext/stream the
    parameters, the centroids (ELL arrays ``ell_terms`` int32 (K, n_clusters) -1 padded,
    ``ell_weights`` float32 (K, n_clusters), ``magnitude`` float64, ``size`` int64), the latency
    percentiles and throughput. Returns the stats dict (also stored there).
    """
    with CorpusRows(path) as rows:  # the readers' checks: layout, indptr, annotations, then each chunk
        if rows.n_docs == 0:
            raise InputError(f"{path}: the corpus has zero documents")
        doc_ids, terms, label = rows.annotations()
        return _cluster_rows(rows, path, output, doc_ids, terms, label, threshold, max_terms, device, batch_size,
                             candidates, state, quiet, backend, chunk_docs, clusterer_options)


def _cluster_rows(rows: CorpusRows, path, output, doc_ids, terms, label, threshold, max_terms, device, batch_size,
                  candidates, state, quiet, backend, chunk_docs, clusterer_options) -> dict:
    """cluster_corpus's work on the opened, checked file."""
    n_docs, n_terms = rows.n_docs, rows.n_terms
    saved = load_state(state) if state and os.path.exists(state) else None
    threshold, max_terms = resolve_params(saved, threshold, max_terms, state)
    sc = StreamClusterer(threshold, max_terms, device=device, batch_size=batch_size, candidates=candidates,
                         backend=backend, **clusterer_options)
    _resume(saved, state, sc, "corpus", terms)
    sc.warm_up()
    cluster = np.empty(n_docs, np.int32)
    sims = np.empty(n_docs, np.float64)
    new = np.empty(n_docs, np.bool_)
    latency = np.empty(n_docs, np.float64)
    seconds = 0.0
    with progress(n_docs, "clustering", quiet) as bar:
        for start in range(0, n_docs, chunk_docs):
            stop = min(n_docs, start + chunk_docs)
            X = rows.read(start, stop)
            r = sc.partial_fit(X)
            cluster[start:stop], sims[start:stop], new[start:stop] = r.cluster, r.similarity, r.new_cluster
            latency[start:stop] = r.latency_s
            seconds += r.seconds
            bar.update(stop - start)
    stats = _stats_dict(sc, n_docs, seconds, latency)
    uns = {"gputext": {"stream": {
        "threshold": sc.threshold, "max_terms": sc.K, "batch_size": sc.batch_size, "candidates": candidates,
        "backend": sc.backend.name, "input": os.path.basename(path), "n_clusters": sc.n_clusters,
        "resumed_from_state": saved is not None, **stats, **sc.centroids()}}}
    uns["gputext"]["stream"].pop("length")
    obs = {"cluster": cluster, "similarity": sims, "new_cluster": new}
    if label is not None:
        obs["label"] = label
    empty = sp.csr_matrix((n_docs, n_terms), dtype=np.float32)
    with atomic_output(output) as tmp:  # the state first: when its write fails, -o does not appear either
        write_corpus(Corpus(empty, doc_ids, terms, obs, {}, {}, uns), tmp)
        if state:
            save_state(state, sc, "corpus", terms)
    info(summary_line(n_docs, sc.n_clusters, seconds, latency, sc.backend, sc.device_bytes()), quiet)
    return stats


# ----------------------------------------------------------------------------- JSONL input

class _LineReader:
    """Lines of a text stream, in batches: the first line of a batch waits, the rest are what has
    already arrived (up to ``batch_size``), so a slow stream is answered line by line and a fast
    one in full batches. Falls back to plain line reading when the stream has no file descriptor."""

    def __init__(self, stream, batch_size: int, stop_flag: list):
        self.stream = stream
        self.batch_size = batch_size
        self.stop_flag = stop_flag
        self.buffer = b""
        self.eof = False
        try:
            self.fd = stream.fileno()
            os.fstat(self.fd)
        except (AttributeError, OSError, ValueError):
            self.fd = None
        self.lineno = 0

    def _fill(self, timeout) -> None:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            chunk = os.read(self.fd, 1 << 16)
            if chunk:
                self.buffer += chunk
            else:
                self.eof = True

    def batches(self):
        """Yield lists of (lineno, arrival perf_counter, line str) until EOF or a stop request."""
        if self.fd is None:
            yield from self._plain()
            return
        while not self.stop_flag[0]:
            while b"\n" not in self.buffer and not self.eof and not self.stop_flag[0]:
                self._fill(0.25)
            if self.stop_flag[0]:
                return
            # take whatever else has arrived, without waiting
            while not self.eof and self.buffer.count(b"\n") < self.batch_size:
                ready, _, _ = select.select([self.fd], [], [], 0)
                if not ready:
                    break
                self._fill(0)
            now = time.perf_counter()
            batch = []
            while len(batch) < self.batch_size and (b"\n" in self.buffer or (self.eof and self.buffer)):
                if b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                else:
                    line, self.buffer = self.buffer, b""
                self.lineno += 1
                batch.append((self.lineno, now, line.decode("utf-8", "replace")))
            if batch:
                yield batch
            elif self.eof:
                return

    def _plain(self):
        batch = []
        for line in self.stream:
            if isinstance(line, bytes):
                line = line.decode("utf-8", "replace")
            self.lineno += 1
            batch.append((self.lineno, time.perf_counter(), line.rstrip("\n")))
            if len(batch) == self.batch_size:
                yield batch
                batch = []
            if self.stop_flag[0]:
                break
        if batch:
            yield batch


def _parse(lineno: int, line: str, position: int):
    """(id, text) of one JSONL line; raises InputError naming the line."""
    record, text = json_text_record(line, f"stdin line {lineno}", '; expected {"id": ..., "text": "..."}')
    doc_id = record.get("id", position)
    return doc_id, text


@contextmanager
def _stop_on_signals(flag: list):
    """SIGINT/SIGTERM set flag[0] (the stream stops at the next batch boundary and saves its state)."""
    def handler(signum, frame):
        flag[0] = signum
    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: no signal handling
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def cluster_jsonl(instream, outstream, threshold: float | None = None, max_terms: int | None = None,
                  device: str = "auto",
                  batch_size: int | None = None, candidates: str = "auto", idf_from: str | None = None,
                  stopwords: str = "english", state: str | None = None, checkpoint_every: int = 0,
                  quiet: bool = True, backend: Backend | None = None, **clusterer_options) -> dict:
    """Cluster JSONL documents from ``instream`` as they arrive, writing one JSON line per document
    to ``outstream`` (flushed per batch). Returns the stats dict; prints the summary unless quiet."""
    saved = load_state(state) if state and os.path.exists(state) else None
    mode = "idf-from" if idf_from or (saved is not None and saved["mode"] == "idf-from") else "as-it-goes"
    if saved is not None and saved["mode"] not in ("idf-from", "as-it-goes"):
        raise InputError(f"--state {state} was written by a {saved['mode']} run, not by a JSONL stream")
    if saved is not None and saved["mode"] == "as-it-goes" and idf_from:
        raise InputError(f"--state {state} was written by a stream without --idf-from (vocabulary updated as it "
                         "goes); resume it without --idf-from")
    if idf_from:
        weighter = StreamWeighter.from_reference(idf_from, stopwords)
        if saved is not None and (len(saved["vocabulary"]) != weighter.n_terms
                                  or not np.array_equal(saved["vocabulary"], np.asarray(weighter.terms, dtype=object))):
            raise InputError(f"--state {state}: its vocabulary differs from --idf-from {idf_from}'s")
    elif saved is not None:
        weighter = StreamWeighter(mode, saved["vocabulary"], saved.get("df"), int(saved["reference_n_docs"]),
                                  str(saved.get("stopwords", stopwords)))
    else:
        weighter = StreamWeighter("as-it-goes", stopwords=stopwords)
    threshold, max_terms = resolve_params(saved, threshold, max_terms, state)
    sc = StreamClusterer(threshold, max_terms, device=device, batch_size=batch_size, candidates=candidates,
                         backend=backend, **clusterer_options)
    if saved is not None:
        sc.restore(saved)
    sc.warm_up()  # compile before the first document arrives: its latency is then the clustering's
    stop = [0]
    latencies: list[np.ndarray] = []
    seconds = 0.0
    n_done = 0
    since_checkpoint = 0
    error = None
    with _stop_on_signals(stop):
        reader = _LineReader(instream, sc.batch_size, stop)
        for batch in reader.batches():
            ids, texts, arrival = [], [], []
            for lineno, when, line in batch:
                if not line.strip():
                    continue
                try:
                    doc_id, text = _parse(lineno, line, sc.n_docs_seen + len(ids))
                except InputError as exc:
                    error = exc
                    break
                ids.append(doc_id)
                texts.append(text)
                arrival.append(when)
            if ids:
                X = weighter.weigh(texts)
                r = sc.partial_fit(X, arrival=np.asarray(arrival))
                out = []
                for i, doc_id in enumerate(ids):
                    out.append(json.dumps({"id": doc_id, "cluster": int(r.cluster[i]),
                                           "similarity": float(r.similarity[i]), "new": bool(r.new_cluster[i])}))
                outstream.write("\n".join(out) + "\n")
                outstream.flush()
                now = time.perf_counter()
                latencies.append(now - np.asarray(arrival))
                seconds += r.seconds
                n_done += len(ids)
                since_checkpoint += len(ids)
                if state and checkpoint_every and since_checkpoint >= checkpoint_every:
                    save_state(state, sc, mode, weighter.terms, weighter)
                    since_checkpoint = 0
            if error is not None or stop[0]:
                break
    if state:
        save_state(state, sc, mode, weighter.terms, weighter)
    lat = np.concatenate(latencies) if latencies else np.zeros(0)
    stats = _stats_dict(sc, n_done, seconds, lat)
    stats["stopped_by_signal"] = int(stop[0])
    if error is not None:
        raise error
    if stop[0]:
        info(f"stopped by signal {signal.Signals(stop[0]).name} after {n_done} documents"
             + (f"; state saved to {state}" if state else ""), quiet=False)
    info(summary_line(n_done, sc.n_clusters, seconds, lat, sc.backend, sc.device_bytes()), quiet)
    return stats
