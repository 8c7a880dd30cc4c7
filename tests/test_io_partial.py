"""The public partial reader (gputext.io.partial): what it reads equals read_corpus's, and it
decodes ids and terms only when asked."""
from __future__ import annotations

import numpy as np
import pytest

from gputext.errors import FormatError
from gputext.io import Categorical, Corpus, read_corpus, write_corpus
from gputext.io.partial import present_keys, read_elements, read_parts
from test_star_reference import random_corpus


@pytest.fixture
def path(tmp_path):
    n = 40
    c = Corpus(random_corpus(n, 30, 5, seed=3), np.array([f"d{i}" for i in range(n)], dtype=object), None,
               obs={"label": Categorical((np.arange(n) % 3).astype(np.int32), np.array(["a", "b", "c"], dtype=object))},
               obsm={"emb": np.arange(2 * n, dtype=np.float32).reshape(n, 2)}, uns={"k": {"x": 1}})
    p = str(tmp_path / "c.h5")
    write_corpus(c, p)
    return p


def test_parts_equal_read_corpus_and_decode_lazily(path):
    whole = read_corpus(path)
    p = read_parts(path, uns=True)
    assert (p.X != whole.X).nnz == 0 and p.doc_ids is None and p.terms is None
    assert p.obs["label"].codes.tolist() == whole.obs["label"].codes.tolist()
    assert np.array_equal(p.obsm["emb"], whole.obsm["emb"]) and p.uns["k"] == {"x": 1}
    assert p.load_ids().tolist() == whole.doc_ids.tolist() and p.load_terms().tolist() == whole.terms.tolist()
    assert p.decoded == ["obs", "var"] and p.terms_digest is not None


def test_a_row_range_is_the_same_rows(path):
    whole = read_corpus(path)
    p = read_parts(path, rows=(7, 19))
    assert p.n_docs == 12 and (p.X != whole.X[7:19]).nnz == 0
    assert p.load_ids().tolist() == whole.doc_ids[7:19].tolist()
    assert p.obs["label"].codes.tolist() == whole.obs["label"].codes[7:19].tolist()
    assert np.array_equal(p.obsm["emb"], whole.obsm["emb"][7:19])
    with pytest.raises(ValueError):
        read_parts(path, rows=(5, 41))


def test_elements_by_path(path):
    got = read_elements(path, ["obs/_index", "obsm/emb", "obs/label"])
    assert got["obs/_index"].tolist() == [f"d{i}" for i in range(40)]
    assert got["obsm/emb"].shape == (40, 2) and isinstance(got["obs/label"], Categorical)
    assert present_keys(path, ["obsm/emb", "obsm/clusters", "obs"]) == ["obsm/emb", "obs"]
    assert read_elements(path, ["obsm/clusters"], missing_ok=True) == {}
    with pytest.raises(FormatError, match="/obsm/clusters is missing"):
        read_elements(path, ["obsm/clusters"])
