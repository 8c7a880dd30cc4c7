"""AnnData in and out: a gputext Corpus <-> an ``anndata.AnnData`` (anndata is optional: imported
only here, on use). This module sits below gputext.io.corpus: it reads and builds the corpus's
fields (arrays, Categorical columns, dicts) and never imports the corpus module, whose
``Corpus.to_anndata`` / ``Corpus.from_anndata`` (and ``from_anndata``) call it.

    from gputext.io import read_corpus, write_corpus, to_anndata, from_anndata
    adata = read_corpus("train.h5", as_anndata=True)      # or to_anndata(read_corpus("train.h5"))
    write_corpus(adata, "copy.h5")                         # an AnnData is converted by from_anndata
    corpus = from_anndata(adata)

Mapping: X <-> X (CSR float32 in the corpus; an AnnData's dense or other sparse X is converted),
obs_names <-> doc_ids, var_names <-> terms, obs / var columns <-> obs / var (pandas categoricals
<-> gputext Categorical; other columns as NumPy arrays; string columns as object arrays), obsm
<-> obsm (NumPy arrays and sparse matrices; DataFrames as their values), uns <-> uns (dicts).
The files are the same format either way: anndata.read_h5ad opens any corpus file.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from .categorical import Categorical


def _import_anndata():
    try:
        import anndata
        import pandas as pd
    except ImportError:
        raise InputError("AnnData conversion needs the anndata package (pip install anndata)") from None
    return anndata, pd


def _frame(pd, index, columns: dict):
    data = {}
    for name, value in columns.items():
        if isinstance(value, Categorical):
            data[name] = pd.Categorical.from_codes(np.asarray(value.codes, np.int64),
                                                   categories=[str(c) for c in value.categories])
        else:
            data[name] = np.asarray(value)
    return pd.DataFrame(data, index=pd.Index([str(v) for v in index]))


def to_anndata(corpus):
    """An anndata.AnnData holding ``corpus`` (a gputext.io.Corpus; module docstring)."""
    anndata, pd = _import_anndata()
    obsm = {k: (sp.csr_matrix(v) if sp.issparse(v) else np.asarray(v)) for k, v in corpus.obsm.items()}
    return anndata.AnnData(X=corpus.X, obs=_frame(pd, corpus.doc_ids, corpus.obs),
                           var=_frame(pd, corpus.terms, corpus.var), obsm=obsm, uns=dict(corpus.uns))


def _columns(pd, frame) -> dict:
    out = {}
    for name in frame.columns:
        col = frame[name]
        if isinstance(col.dtype, pd.CategoricalDtype):
            out[str(name)] = Categorical(np.asarray(col.cat.codes, np.int32),
                                         np.asarray([str(c) for c in col.cat.categories], dtype=object))
        elif col.dtype == object or pd.api.types.is_string_dtype(col.dtype):
            out[str(name)] = np.asarray(["" if v is None else str(v) for v in col], dtype=object)
        else:
            out[str(name)] = np.asarray(col)
    return out


def corpus_fields(adata) -> dict:
    """The keyword arguments of gputext.io.Corpus (X, doc_ids, terms, obs, var, obsm, uns) read from
    an AnnData (module docstring). Raises InputError when X is missing."""
    _, pd = _import_anndata()
    if adata.X is None:
        raise InputError("the AnnData has no X (a document-term matrix is needed)")
    X = adata.X
    X = sp.csr_matrix(X) if sp.issparse(X) else sp.csr_matrix(np.asarray(X, dtype=np.float32))
    obsm = {}
    for key in adata.obsm.keys():
        value = adata.obsm[key]
        obsm[str(key)] = sp.csr_matrix(value) if sp.issparse(value) else np.asarray(value)
    return {"X": X, "doc_ids": np.asarray(adata.obs_names, dtype=object),
            "terms": np.asarray(adata.var_names, dtype=object), "obs": _columns(pd, adata.obs),
            "var": _columns(pd, adata.var), "obsm": obsm, "uns": dict(adata.uns)}
