"""SciPy sparse .npz input (`gputext corpus build X.npz [--labels FILE]`).

The matrix is read with scipy.sparse.load_npz (any format scipy.sparse.save_npz writes; rows are
documents). Terms are named by column position ("0", "1", ...); documents "<file>:<row>".
Decisions: the values are features as stored (like svmlight: `corpus build` defaults to
--weighting none for npz, so a saved TF-IDF matrix stays as it is; pass --weighting tfidf for a
count matrix). Labels, when given, come from a text file of one line per row: the row's label,
comma-separated labels for a multi-label row, an empty line for none; exactly as many lines as
rows (what `gputext corpus export --to npz` writes beside the .npz).
"""
from __future__ import annotations

import os
import warnings
import zipfile

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from .limits import check_declared_shape, check_float32
from .readers import MatrixInput, display_name, read_text


def read_labels_file(path: str, n_rows: int) -> tuple[list[list[str]], bool]:
    """(labels per row, multilabel) from a one-line-per-row file."""
    lines = read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != n_rows:
        raise InputError(f"--labels {path}: {len(lines)} lines, expected one per row of the matrix ({n_rows})")
    labels = [[p.strip() for p in line.rstrip("\r").split(",") if p.strip()] for line in lines]
    return labels, any(len(lab) > 1 for lab in labels)


def read_npz(path: str, labels: str | None = None) -> MatrixInput:
    """A .npz sparse matrix (scipy.sparse.save_npz) as rows of features, with optional labels."""
    name = display_name(path)
    try:
        with open(path, "rb") as fh, warnings.catch_warnings():  # closed on an error too (unlike load_npz(path))
            warnings.simplefilter("error", np.exceptions.ComplexWarning)  # complex indices: refused, not cast
            M = sp.load_npz(fh)
            check_declared_shape(name, M.shape[0], M.shape[1], M.nnz)
            if M.dtype.kind == "c":
                raise InputError(f"{name}: the matrix holds complex numbers, expected real features")
            M.check_format(full_check=True)  # indptr, indices in range (a damaged file)
            values = sp.csr_matrix(M, dtype=np.float64)
    except InputError:
        raise
    except (ValueError, OSError, KeyError, zipfile.BadZipFile, EOFError, IndexError, TypeError,
            NotImplementedError, np.exceptions.ComplexWarning) as exc:
        raise InputError(f"{name}: not a SciPy sparse .npz file (scipy.sparse.save_npz): "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if values.nnz and not np.all(np.isfinite(values.data)):
        raise InputError(f"{name}: the matrix contains NaN or infinite values")
    check_float32(name, values.data)
    base = os.path.basename(path)
    ids = [f"{base}:{i}" for i in range(values.shape[0])]
    terms = np.array([str(j) for j in range(values.shape[1])], dtype=object)
    row_labels, multilabel = read_labels_file(labels, values.shape[0]) if labels else (None, False)
    return MatrixInput(values, terms, ids, row_labels, "features", multilabel=multilabel)
