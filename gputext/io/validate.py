"""`gputext corpus validate`: every problem of a corpus file, not just the first.

``corpus_problems(path)`` returns a list of one-line problems (empty: the file is valid). It
checks what the readers check and more, reading /X in row chunks (CorpusRows) so that files
larger than memory are checked in bounded memory:

    file        opens as HDF5; gputext-format "corpus" (or an anndata file); format version <= 1
    /X          CSR group (encoding-type csr_matrix), 2-d shape attribute, data float / indices
                and indptr integer 1-d datasets; indptr of n_docs + 1 entries, from 0,
                non-decreasing, ending at len(data) = len(indices); column indices in
                [0, n_terms), sorted and unique within every row; data finite
    /obs /var   dataframe groups whose index holds n_docs (n_terms) entries; every column the
                same length; categorical codes within their categories; document ids unique;
                terms unique; the terms digest (attribute gputext-sha256) equal to the terms
    /obsm       every entry with n_docs rows (CSR entries checked like /X)
    /uns        readable

A problem that makes the rest unreadable (no /X, not CSR) stops the checks of that part only.
"""
from __future__ import annotations

import h5py
import numpy as np

from ..errors import FormatError, InputError
from ..progress import progress
from .commit import committed_length
from .corpus import (DAMAGE, TERMS_DIGEST_ATTR, Categorical, csr_problems, damaged_file_errors, location, unique_problem,
                     open_file, read_element, read_str_array, terms_digest)
from .rows import CorpusRows, csr_header_problems

CHUNK_NNZ = 1 << 24  # entries checked at a time (about 130 MB of data + indices)
PROGRESS_MIN_NNZ = 1 << 26  # smaller files are checked in a few seconds: no progress bar


def _x_problems(path: str, problems: list, quiet: bool) -> tuple[int, int, int] | None:
    """Check /X chunk by chunk; returns (n_docs, n_terms, nnz) when the header is readable."""
    try:
        rows = CorpusRows(path)
    except FormatError as exc:
        problems.append(str(exc))
        return None
    with rows, progress(rows.nnz, f"validating {path}", quiet or rows.nnz < PROGRESS_MIN_NNZ) as bar:
        start = 0
        while start < rows.n_docs:
            stop = int(np.searchsorted(rows.indptr, rows.indptr[start] + CHUNK_NNZ, side="right")) - 1
            stop = min(rows.n_docs, max(stop, start + 1))
            try:
                found = rows.problems(start, stop)
            except FormatError as exc:
                found = [str(exc)]
            if found:
                problems.extend(found)
                break
            bar.update(int(rows.indptr[stop] - rows.indptr[start]))
            start = stop
        return rows.n_docs, rows.n_terms, rows.nnz


def _frame_problems(f, key: str, n_rows: int, what: str, problems: list) -> None:
    if not isinstance(f.get(key), h5py.Group):
        problems.append(f"{location(f, key)} is missing or not a group (a dataframe)")
        return
    g = f[key]
    index_key = g.attrs.get("_index", "_index")
    index_key = index_key.decode() if isinstance(index_key, bytes) else str(index_key)
    ds = g.get(index_key)
    if not isinstance(ds, h5py.Dataset):
        problems.append(f"{location(f, key + '/' + index_key)} is missing (the {what})")
    elif (committed_length(ds) if ds.ndim else 0) != n_rows:
        problems.append(f"{location(f, key + '/' + index_key)} has {committed_length(ds) if ds.ndim else 0} entries, "
                        f"expected {n_rows}")
    else:
        values = read_str_array(ds)
        problem = unique_problem(f, f"{key}/{index_key}", values, what)
        if problem:
            problems.append(problem)
        stored = ds.attrs.get(TERMS_DIGEST_ATTR)
        stored = stored.decode() if isinstance(stored, bytes) else stored
        if stored is not None and str(stored) != terms_digest(values):
            problems.append(f"{location(f, key + '/' + index_key)}: attribute {TERMS_DIGEST_ATTR} does not match "
                            "the stored strings (edited after writing?)")
    for name in g.keys():
        if name == index_key:
            continue
        try:
            value = read_element(f, f"{key}/{name}")
        except (FormatError, OSError, *DAMAGE) as exc:
            problems.append(f"{location(f, key + '/' + name)} cannot be read ({str(exc).splitlines()[0] if str(exc) else exc!r})")
            continue
        n = len(value) if hasattr(value, "__len__") else -1
        if n != n_rows:
            problems.append(f"{location(f, key + '/' + name)} has {n} entries, expected {n_rows}")
        elif isinstance(value, Categorical) and n and (value.codes.min() < -1 or value.codes.max() >= len(value.categories)):
            problems.append(f"{location(f, key + '/' + name + '/codes')} has codes outside the categories")
        elif isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            problems.append(f"{location(f, key + '/' + name)} contains NaN or infinite values")


def _obsm_problems(f, n_docs: int, problems: list) -> None:
    if "obsm" not in f:
        return
    for key in f["obsm"].keys():
        full = f"obsm/{key}"
        obj = f[full]
        if isinstance(obj, h5py.Group):
            header = next(csr_header_problems(f, full), None)
            if header:
                problems.append(header)
                continue
            shape = tuple(int(s) for s in np.ravel(obj.attrs["shape"]))
            problems.extend(csr_problems(location(f, full), shape, obj["data"][()], obj["indices"][()],
                                         obj["indptr"][()]))
            rows = shape[0]
        else:
            rows = obj.shape[0] if obj.ndim else -1
        if rows != n_docs:
            problems.append(f"{location(f, full)} has {rows} rows, expected n_docs = {n_docs}")


def corpus_problems(path: str, quiet: bool = True) -> list[str]:
    """Every problem of the corpus file at ``path`` (module docstring); [] when it is valid.
    ``quiet`` False: a progress bar over /X's entries for files of more than 2^26 of them."""
    problems: list[str] = []
    try:
        with damaged_file_errors(path):
            return _problems(path, problems, quiet)
    except (FormatError, InputError, OSError) as exc:
        return problems + [" ".join(str(exc).split())]


def _problems(path: str, problems: list, quiet: bool) -> list[str]:
    f = open_file(path)
    with f:
        fmt = f.attrs.get("gputext-format")
        fmt = fmt.decode("utf-8", "replace") if isinstance(fmt, bytes) else fmt
        if fmt is not None and not isinstance(fmt, str):
            return [f"{location(f, '')} has gputext-format {fmt!r}, expected 'corpus'"]
        if fmt is None and f.attrs.get("encoding-type") is None:
            return [f"{location(f, '')} has neither gputext-format nor anndata encoding-type attributes: "
                    "not a gputext corpus"]
        if fmt is not None and fmt != "corpus":
            return [f"{location(f, '')} has gputext-format {fmt!r}, expected 'corpus'"]
        label = f.gputext_label  # type: ignore[attr-defined]
    shape = _x_problems(path, problems, quiet)
    if shape is None:
        return problems
    n_docs, n_terms, _ = shape
    with open_file(path) as f:
        for what, check in (("obs", lambda: _frame_problems(f, "obs", n_docs, "document ids", problems)),
                            ("var", lambda: _frame_problems(f, "var", n_terms, "terms", problems)),
                            ("obsm", lambda: _obsm_problems(f, n_docs, problems)),
                            ("uns", lambda: read_element(f, "uns") if "uns" in f else None)):
            try:
                with damaged_file_errors(f"{label}: /{what}"):
                    check()
            except FormatError as exc:
                problems.append(" ".join(str(exc).split()))
    return problems


def corpus_summary(path: str) -> str:
    """One line for a valid file: documents x terms, nonzeros."""
    with CorpusRows(path) as rows:
        return f"{rows.n_docs:,} documents x {rows.n_terms:,} terms, {rows.nnz:,} nonzeros"
