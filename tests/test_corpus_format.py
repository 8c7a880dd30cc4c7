"""Round trips and validation of the HDF5 corpus format."""
import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.errors import FormatError, InputError
from gputext.io import Categorical, Corpus, CorpusWriter, read_corpus, read_rows, write_corpus


def small_corpus(n_docs=5, n_terms=7, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n_docs, n_terms, density=0.4, random_state=seed, format="csr", dtype=np.float32)
    labels = Categorical(rng.integers(0, 3, n_docs).astype(np.int32), np.array(["a", "b", "c"], dtype=object))
    return Corpus(X, [f"d{i}" for i in range(n_docs)], [f"w{j}" for j in range(n_terms)],
                  obs={"label": labels, "qid": np.arange(n_docs, dtype=np.int32)},
                  var={"df": np.asarray((X != 0).sum(0)).ravel().astype(np.int64)},
                  obsm={"knn_indices": np.zeros((n_docs, 2), np.int32)},
                  uns={"gputext": {"weighting": "tfidf", "min_df": 1, "nested": {"k": 3}}})


def test_round_trip(tmp_path):
    c = small_corpus()
    path = str(tmp_path / "c.h5")
    write_corpus(c, path)
    r = read_corpus(path)
    assert (r.X != c.X).nnz == 0 and r.X.dtype == np.float32
    assert list(r.doc_ids) == list(c.doc_ids) and list(r.terms) == list(c.terms)
    assert np.array_equal(r.labels.codes, c.labels.codes) and list(r.labels.categories) == ["a", "b", "c"]
    assert r.uns["gputext"]["weighting"] == "tfidf" and r.uns["gputext"]["nested"]["k"] == 3
    assert r.uns["gputext"]["version"]
    with h5py.File(path) as f:
        assert f.attrs["gputext-format"] == "corpus" and f["X"].attrs["encoding-type"] == "csr_matrix"
        assert f["X/indptr"].dtype == np.int64 and f["X/indices"].dtype == np.int32 and f["X/data"].dtype == np.float32


def test_anndata_reads_it(tmp_path):
    anndata = pytest.importorskip("anndata")
    path = str(tmp_path / "c.h5")
    write_corpus(small_corpus(), path)
    a = anndata.read_h5ad(path)
    assert a.shape == (5, 7) and list(a.obs["label"].cat.categories) == ["a", "b", "c"]


def test_writer_in_chunks(tmp_path):
    c = small_corpus(20, 9)
    path = str(tmp_path / "w.h5")
    with CorpusWriter(path, 9) as w:
        for s in range(0, 20, 7):
            w.append(c.X[s:s + 7], c.doc_ids[s:s + 7], {"label": c.labels.codes[s:s + 7]})
        w.finish(c.terms, var={"df": c.var["df"]}, categories={"label": c.labels.categories})
    r = read_corpus(path)
    assert (r.X != c.X).nnz == 0 and np.array_equal(r.labels.codes, c.labels.codes)
    assert (read_rows(path, 3, 11) != c.X[3:11]).nnz == 0


def test_writer_failure_leaves_nothing(tmp_path):
    path = tmp_path / "w.h5"
    with pytest.raises(RuntimeError):
        with CorpusWriter(str(path), 3) as w:
            w.append(sp.csr_matrix(np.ones((2, 3), np.float32)), ["a", "b"])
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("breakage,key", [
    (lambda f: f["X"].__delitem__("indptr"), "/X/indptr"),
    (lambda f: f["X"].attrs.__setitem__("shape", np.array([5, 3])), "/X/indices"),
    (lambda f: f.__delitem__("obs"), "/obs"),
])
def test_validation_names_the_key(tmp_path, breakage, key):
    path = str(tmp_path / "c.h5")
    write_corpus(small_corpus(), path)
    with h5py.File(path, "r+") as f:
        breakage(f)
    with pytest.raises(FormatError, match=key):
        read_corpus(path)


def test_unsorted_indices_and_nan_refused(tmp_path):
    path = str(tmp_path / "c.h5")
    write_corpus(small_corpus(), path)
    with h5py.File(path, "r+") as f:
        d = f["X/data"][()]
        d[0] = np.nan
        f["X/data"][...] = d
    with pytest.raises(FormatError, match="NaN"):
        read_corpus(path)


def test_missing_empty_truncated_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_corpus(str(tmp_path / "nope.h5"))
    (tmp_path / "empty.h5").write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        read_corpus(str(tmp_path / "empty.h5"))
    path = tmp_path / "c.h5"
    write_corpus(small_corpus(), str(path))
    (tmp_path / "trunc.h5").write_bytes(path.read_bytes()[:300])
    with pytest.raises(FormatError, match="HDF5"):
        read_corpus(str(tmp_path / "trunc.h5"))
    with h5py.File(tmp_path / "foreign.h5", "w") as f:
        f["x"] = 1
    with pytest.raises(FormatError, match="not a gputext corpus"):
        read_corpus(str(tmp_path / "foreign.h5"))


def test_zero_documents_refused(tmp_path):
    path = str(tmp_path / "z.h5")
    write_corpus(Corpus(sp.csr_matrix((0, 4), dtype=np.float32)), path)
    with pytest.raises(InputError, match="zero documents"):
        read_corpus(path)
    assert read_corpus(path, require_docs=False).n_docs == 0


def test_terms_digest_is_stored_by_every_writer_and_tells_lists_apart(tmp_path):
    from gputext.io import corpus as cio
    c = small_corpus(20, 9)
    a, b = str(tmp_path / "a.h5"), str(tmp_path / "b.h5")
    write_corpus(c, a, growable=True)
    with CorpusWriter(b, 9) as w:
        w.append(c.X, c.doc_ids)
        w.finish(c.terms)
    for path in (a, b):
        with h5py.File(path) as f:
            assert f["var/_index"].attrs[cio.TERMS_DIGEST_ATTR] == cio.terms_digest(c.terms)
            assert cio.stored_terms_digest(f, 9) == cio.terms_digest(list(read_corpus(path).terms))
            with pytest.raises(FormatError, match="var/_index has 9 entries, expected 8"):
                cio.stored_terms_digest(f, 8)
    d = cio.terms_digest
    assert d(["ab", "c"]) != d(["a", "bc"]) and d(["a", "b"]) != d(["b", "a"]) and d([]) != d([""])
    assert d(["x", None, 3]) == d(["x", "", "3"])  # as written
    assert len(d(["é"])) == 64 and d(["é"]) != d(["e"])


def test_growable_ids_and_reading_without_decoding(tmp_path):
    from gputext.io import corpus as cio
    c = small_corpus(12, 6)
    path = str(tmp_path / "g.h5")
    write_corpus(c, path, growable=True)
    r = read_corpus(path)
    assert list(r.doc_ids) == list(c.doc_ids)
    with h5py.File(path) as f:
        assert f["obs/_index"].maxshape == (None,) and f["var/_index"].maxshape != (None,)
        ids, cols = cio._read_dataframe(f, "obs", 12, index=False)
        assert ids is None and set(cols) == {"label", "qid"}
        with pytest.raises(FormatError, match="obs/_index has 12 entries, expected 13"):
            cio._read_dataframe(f, "obs", 13, index=False)
    anndata = pytest.importorskip("anndata")
    a = anndata.read_h5ad(path)
    assert list(a.obs_names) == list(c.doc_ids) and list(a.var_names) == list(c.terms)


def test_string_reader_decodes_bytes_and_str(tmp_path):
    from gputext.io import corpus as cio
    path = str(tmp_path / "s.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=np.array(["a", "é", ""], dtype=object), dtype=cio.STR_DTYPE)
        f.create_dataset("bad", data=np.array([b"ok", b"\xff"], dtype=object), dtype=h5py.string_dtype("ascii"))
        f.create_dataset("fixed", data=np.array([b"ab", b"c"], dtype="S2"))
        f.create_dataset("empty", shape=(0,), dtype=cio.STR_DTYPE)
    with h5py.File(path) as f:
        for key, want in (("v", ["a", "é", ""]), ("bad", ["ok", "\ufffd"]), ("fixed", ["ab", "c"]), ("empty", [])):
            got = cio._read_str_array(f[key])
            assert got.dtype == object and list(got) == want and all(type(x) is str for x in got)


def test_sorted_rows_check_equals_a_row_by_row_check():
    """_validate_csr's vectorised sortedness check (neighbour comparison, row starts cleared)
    against a plain per-row check, on random CSR structures with empty rows."""
    from gputext.io import corpus as cio
    rng = np.random.default_rng(0)
    for _ in range(3000):
        n = int(rng.integers(1, 7))
        lens = rng.integers(0, 4, n)
        indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        nnz = int(indptr[-1])
        indices = np.concatenate([np.sort(rng.choice(9, k, replace=False)) for k in lens]).astype(np.int32)
        if nnz and rng.random() < 0.5:
            indices[rng.integers(0, nnz)] = rng.integers(0, 9)
        ok = all(np.all(np.diff(indices[indptr[r]:indptr[r + 1]]) > 0) for r in range(n))
        if ok:
            cio._validate_csr(None, "X", (n, 9), np.ones(nnz, np.float32), indices, indptr)
        else:
            with pytest.raises(FormatError, match="not sorted and unique"):
                cio._validate_csr(None, "X", (n, 9), np.ones(nnz, np.float32), indices, indptr)


@pytest.mark.parametrize("prefault", [False, True])
def test_read_row_pieces_equals_stacked_slices(tmp_path, monkeypatch, prefault):
    """Row ranges of several files read into one matrix (the Dask workers' shard read) equal the
    stacked slices: pieces inside, across and at the ends of files, an empty range, a file
    whose data are float64 (another writer), and rows without entries; with the pages faulted
    in first (PREFAULT_BYTES, 256 MiB of rows, lowered to 0 here) and without."""
    from gputext.io import corpus as cio_mod
    from gputext.io.corpus import Corpus, read_row_pieces, read_rows, write_corpus

    monkeypatch.setattr(cio_mod, "PREFAULT_BYTES", 0 if prefault else 1 << 62)

    rng = np.random.default_rng(3)
    mats = []
    for i, dtype in enumerate((np.float32, np.float64, np.float32)):
        X = sp.random(40 + 7 * i, 30, density=0.2, format="csr", random_state=rng, dtype=dtype)
        X[5] = 0  # a row without entries
        X.eliminate_zeros()
        X.sort_indices()
        mats.append(X)
        write_corpus(Corpus(X.astype(np.float32) if dtype == np.float32 else X), str(tmp_path / f"p{i}.h5"))
    pieces = [(str(tmp_path / "p0.h5"), 3, 40), (str(tmp_path / "p1.h5"), 0, 47), (str(tmp_path / "p2.h5"), 10, 10),
              (str(tmp_path / "p2.h5"), 0, 21)]
    want = sp.vstack([mats[0][3:40], mats[1][0:47], mats[2][0:21]], format="csr").astype(np.float32)
    got = read_row_pieces(pieces)
    assert got.dtype == np.float32 and got.indices.dtype == np.int32 and got.shape == want.shape
    assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)
    one = read_rows(str(tmp_path / "p1.h5"), 5, 6)
    assert one.shape == (1, 30) and one.nnz == 0
