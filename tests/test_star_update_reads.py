"""What a DClustR update reads: the stored vocabulary digest (/var/_index attribute) and document
id hashes (graph/doc_id_hash) let it skip decoding the cluster file's terms and ids; every
fallback (files without them, a digest that differs, a hash that collides) decodes the strings
and gives the same file; duplicate ids and other vocabularies are still refused."""
from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from gputext.cli import cli
from gputext.cluster import dclus
from gputext.errors import InputError
from gputext.io import Corpus, read_corpus, write_corpus
from gputext.io import corpus as cio
from test_star_append import assert_same_file, base_file, corpora, snapshot

DIGEST = cio.TERMS_DIGEST_ATTR


def fnv1a64(s: str) -> int:
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & (2**64 - 1)
    return h


def setup(tmp_path, seed=11, n=90, beta=0.3):
    old, add1, add2 = corpora(seed, n, n // 2, 3 * n // 4)
    base = str(tmp_path / "base.h5")
    base_file(old, beta, base)
    paths = {}
    for name, c in (("add1", add1), ("add2", add2)):
        paths[name] = str(tmp_path / f"{name}.h5")
        write_corpus(c, paths[name])
    return old, add1, add2, base, paths


def reference(tmp_path, base, adds, name="ref.h5"):
    """The new-file writer's result of the same updates (decodes everything)."""
    ref = str(tmp_path / name)
    src = base
    for add in adds:
        dclus.update(src, add, ref, device="cpu", write="new")
        src = ref
    return ref


def test_id_hashes_are_fnv1a_of_the_written_strings():
    ids = ["", "a", "doc17", "é", "日本語", "x" * 300, None, 5]
    got = dclus.id_hashes(ids)
    assert got.dtype == np.uint64
    assert got.tolist() == [fnv1a64("" if v is None else str(v)) for v in ids]
    ascii_ids = [f"d{i}" for i in range(1000)]  # the ASCII fast path
    assert dclus.id_hashes(ascii_ids).tolist() == [fnv1a64(v) for v in ascii_ids]
    assert len(dclus.id_hashes([])) == 0


def test_cluster_file_stores_digest_id_hashes_and_growable_ids(tmp_path):
    old, _, _, base, _ = setup(tmp_path)
    with h5py.File(base, "r") as f:
        assert f["var/_index"].attrs[DIGEST] == cio.terms_digest(old.terms)
        assert f["obs/_index"].maxshape == (None,)
        assert f[dclus.GRAPH_KEY]["doc_id_hash"][()].tolist() == dclus.id_hashes(old.doc_ids).tolist()


def test_update_from_the_path_with_equal_digests_decodes_no_old_string(tmp_path):
    _, add1, add2, base, paths = setup(tmp_path)
    ref = reference(tmp_path, base, (add1, add2))
    for add in ("add1", "add2"):
        r = dclus.update(base, paths[add], base, device="cpu")
        assert r.decoded == {"old_ids": False, "old_terms": False, "added_terms": False}
        assert r.stats["seconds_read_added"] >= 0
    assert_same_file(base, ref)
    with h5py.File(base, "r") as f:  # ids appended in place, hashes of the union
        ids = cio._read_str_array(f["obs/_index"])
        assert f["obs/_index"].maxshape == (None,)
        assert f[dclus.GRAPH_KEY]["doc_id_hash"][()].tolist() == dclus.id_hashes(ids).tolist()
    assert list(read_corpus(base).doc_ids) == [f"doc{i}" for i in range(90)]


def test_corpus_argument_is_digested_and_the_old_terms_stay_unread(tmp_path):
    _, add1, _, base, _ = setup(tmp_path)
    ref = reference(tmp_path, base, (add1,))
    r = dclus.update(base, add1, base, device="cpu")
    assert r.decoded == {"old_ids": False, "old_terms": False, "added_terms": False}
    assert_same_file(base, ref)


@pytest.mark.parametrize("where", ["old", "added", "both", "old wrong"])
def test_absent_or_wrong_digest_falls_back_to_the_strings(tmp_path, where):
    _, add1, add2, base, paths = setup(tmp_path)
    ref = reference(tmp_path, base, (add1, add2))
    if where in ("old", "both", "old wrong"):
        with h5py.File(base, "a") as f:
            if where == "old wrong":
                f["var/_index"].attrs[DIGEST] = "0" * 64
            else:
                del f["var/_index"].attrs[DIGEST]
    if where in ("added", "both"):
        with h5py.File(paths["add1"], "a") as f:
            del f["var/_index"].attrs[DIGEST]
    r = dclus.update(base, paths["add1"], base, device="cpu")
    assert r.decoded["added_terms"]  # no pair of equal stored digests: the added terms are digested
    assert r.decoded["old_terms"] == (where != "added")  # ... and compared with the old ones unless that matched
    assert not r.decoded["old_ids"]
    with h5py.File(base, "r") as f:  # the digest is (re)stored: the next update needs no strings
        assert f["var/_index"].attrs[DIGEST] == cio.terms_digest(add1.terms)
    r = dclus.update(base, paths["add2"], base, device="cpu")
    assert r.decoded == {"old_ids": False, "old_terms": False, "added_terms": False}
    assert_same_file(base, ref)


def test_other_vocabulary_is_refused_from_path_and_corpus(tmp_path):
    _, add1, _, base, _ = setup(tmp_path)
    before = snapshot(base, volatile=())
    terms = add1.terms.copy()
    terms[7] = "renamed"
    other = Corpus(add1.X, add1.doc_ids, terms, dict(add1.obs), {}, dict(add1.obsm))
    other_path = str(tmp_path / "other.h5")
    write_corpus(other, other_path)
    for added in (other, other_path):
        with pytest.raises(InputError, match="different vocabulary"):
            dclus.update(base, added, base, device="cpu")
    with h5py.File(other_path, "a") as f:  # no digest on the added file: the strings decide
        del f["var/_index"].attrs[DIGEST]
    with pytest.raises(InputError, match="different vocabulary"):
        dclus.update(base, other_path, base, device="cpu")
    fewer = Corpus(add1.X[:, :50], add1.doc_ids, add1.terms[:50])  # other term count: refused before any digest
    with pytest.raises(InputError, match="different vocabulary"):
        dclus.update(base, fewer, base, device="cpu")
    r = CliRunner().invoke(cli, ["cluster", "star", "--update", base, "--add", str(tmp_path / "add1.h5"), "--beta",
                                 "0.3", "-o", str(tmp_path / "o.h5"), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    write_corpus(Corpus(add1.X[:, :50], add1.doc_ids, add1.terms[:50]), str(tmp_path / "few.h5"))
    r = CliRunner().invoke(cli, ["cluster", "star", "--update", base, "--add", str(tmp_path / "few.h5"), "-o", base,
                                 "--device", "cpu"])
    assert r.exit_code == 2 and "different vocabulary" in r.output
    assert snapshot(base, volatile=()) == before


def test_duplicate_ids_are_refused_with_hashes_and_after_a_collision(tmp_path, monkeypatch):
    old, add1, _, base, paths = setup(tmp_path)
    before = snapshot(base, volatile=())
    dup = add1.take(np.arange(len(add1.doc_ids)))
    dup.doc_ids = dup.doc_ids.copy()
    dup.doc_ids[3] = old.doc_ids[5]
    dup_path = str(tmp_path / "dup.h5")
    write_corpus(dup, dup_path)
    for added in (dup, dup_path):
        with pytest.raises(InputError, match=r"1 added document ids already exist.*'doc5'"):
            dclus.update(base, added, base, device="cpu")
    r = CliRunner().invoke(cli, ["cluster", "star", "--update", base, "--add", dup_path, "-o", base, "--device", "cpu"])
    assert r.exit_code == 2 and "already exist" in r.output
    assert snapshot(base, volatile=()) == before
    # every hash colliding (stored and computed alike): the ids are decoded and compared, so a
    # collision refuses only real duplicates
    ref = reference(tmp_path, base, (add1,))
    real = dclus.id_hashes
    with h5py.File(base, "a") as f:
        f[dclus.GRAPH_KEY]["doc_id_hash"][...] = np.zeros(len(old.doc_ids), np.uint64)
    monkeypatch.setattr(dclus.read, "id_hashes", lambda ids: np.zeros(len(ids), np.uint64))
    with pytest.raises(InputError, match="already exist"):
        dclus.update(base, dup_path, base, device="cpu")
    r = dclus.update(base, paths["add1"], base, device="cpu")
    assert r.decoded["old_ids"]
    monkeypatch.setattr(dclus.read, "id_hashes", real)
    with h5py.File(base, "a") as f:
        g = f[dclus.GRAPH_KEY]
        assert not np.any(g["doc_id_hash"][()])
        g["doc_id_hash"][...] = real(cio._read_str_array(f["obs/_index"]))
    assert_same_file(base, ref)


def test_file_without_id_hashes_and_with_fixed_size_ids_is_upgraded(tmp_path):
    """A cluster file written before the hashes, the growable ids and the digest: the update
    decodes the strings, writes the same file as the new-file writer, and leaves a file whose
    next update decodes nothing."""
    _, add1, add2, base, paths = setup(tmp_path, seed=12, n=120, beta=0.25)
    ref = reference(tmp_path, base, (add1, add2))
    with h5py.File(base, "a") as f:
        del f[dclus.GRAPH_KEY]["doc_id_hash"]
        del f["var/_index"].attrs[DIGEST]
        ids = f["obs/_index"][()]
        attrs = dict(f["obs/_index"].attrs)
        del f["obs/_index"]
        ds = f["obs"].create_dataset("_index", data=ids, dtype=cio.STR_DTYPE)
        ds.attrs.update(attrs)
    copy = str(tmp_path / "copy.h5")
    r = dclus.update(base, paths["add1"], copy, device="cpu")  # into another file: the input stays as it was
    assert r.decoded == {"old_ids": True, "old_terms": True, "added_terms": True}
    r = dclus.update(base, paths["add1"], base, device="cpu")
    assert r.decoded == {"old_ids": True, "old_terms": True, "added_terms": True}
    with h5py.File(base, "r") as f:
        assert f["obs/_index"].maxshape == (None,) and "doc_id_hash" in f[dclus.GRAPH_KEY]
        assert f["var/_index"].attrs[DIGEST] == cio.terms_digest(add1.terms)
    assert_same_file(copy, base)
    r = dclus.update(base, paths["add2"], base, device="cpu")
    assert r.decoded == {"old_ids": False, "old_terms": False, "added_terms": False}
    assert_same_file(base, ref)


def test_new_file_writer_output_updates_in_place_without_strings(tmp_path):
    """write="new" writes fixed-size ids: the next in-place update rewrites them once (growable)."""
    _, add1, add2, base, paths = setup(tmp_path, seed=13)
    mid = reference(tmp_path, base, (add1,), "mid.h5")
    ref = reference(tmp_path, base, (add1, add2))
    r = dclus.update(mid, paths["add2"], mid, device="cpu")
    assert r.decoded == {"old_ids": False, "old_terms": False, "added_terms": False}
    assert_same_file(mid, ref)
    with h5py.File(mid, "r") as f:
        assert f["obs/_index"].maxshape == (None,)
    shutil.copyfile(mid, str(tmp_path / "again.h5"))


def test_cli_update_reads_the_added_corpus_from_stdin(tmp_path):
    _, add1, _, base, paths = setup(tmp_path, seed=14)
    ref = reference(tmp_path, base, (add1,))
    with open(paths["add1"], "rb") as fh:
        data = fh.read()
    r = CliRunner().invoke(cli, ["cluster", "star", "--update", base, "--add", "-", "-o", base, "--device", "cpu"],
                           input=data)
    assert r.exit_code == 0, r.output
    assert_same_file(base, ref)
    r = CliRunner().invoke(cli, ["cluster", "star", "--update", base, "--add", "-", "-o", base, "--device", "cpu"],
                           input=b"")
    assert r.exit_code == 2 and "stdin is empty" in r.output
