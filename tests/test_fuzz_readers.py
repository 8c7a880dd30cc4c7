"""Seeded fuzz of every reader: random corruption never gives a traceback or an exit code other
than 0 or 2, and never changes the input.

Text formats (tab, tsv, jsonl, svmlight, UCI bag-of-words, counts CSV): a small valid file is
damaged by random byte edits (flips, insertions of tabs, \\r, NUL, quotes, colons, digits, invalid
UTF-8, huge or non-finite numbers; deletions; truncation; repeated lines) and built with
``build_corpus`` in-process. HDF5: a small valid corpus file gets random key deletions, dtype
swaps, length changes, value damage (NaN, negative or huge indices, unsorted rows), attribute
damage (shape, encoding, version) or a truncated file, then goes through read_corpus,
corpus_info, the checked row reader (cluster stream's) and corpus_problems (validate, which
must return problems instead of raising). Every exception is mapped to an exit code by the CLI's
own ``exit_code_for``; anything but 0 or 2 fails with the seed of the case.
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

import h5py
import numpy as np
import scipy.sparse as sp

from gputext.cli import exit_code_for
from gputext.io import Categorical, Corpus, build_corpus, read_corpus, write_corpus
from gputext.io.info import corpus_info
from gputext.io.rows import CorpusRows
from gputext.io.validate import corpus_problems

N_TEXT = 1500
N_HDF5 = 600
SEED = 20261125

TEXT_SEEDS = {
    "tab": "label\ttext\nd\tstring\nclass\t\nsport\tthe match was won late\nnews\tmarkets fell on friday\n"
           "sport\ta late goal in the match\nnews\tthe bank raised rates\n",
    "tsv": "sport\tthe match was won late\nnews\tmarkets fell on friday\nsport\ta goal\tin the match\n",
    "jsonl": '{"id": "a", "text": "the match was won", "label": "sport"}\n'
             '{"id": "b", "text": "markets fell", "labels": ["news", "econ"]}\n{"text": "a late goal"}\n',
    "svmlight": "1 qid:1 1:0.5 3:1.25 7:2\n0 qid:1 2:1 3:0.5\n2 qid:2 1:1e-3 4:7 # comment\n1 qid:2 5:3\n",
    "counts-csv": "a,1,0,2,0\nb,0,3,1,1\na,2,2,0,0\n",
    "uci": "3\n4\n5\n1 1 2\n1 3 1\n2 2 4\n3 4 1\n3 1 1\n",
}
UCI_VOCAB = "match\nmarkets\ngoal\nrates\n"
NOISE = [b"\t", b"\r", b"\n", b"\x00", b":", b",", b"\"", b"{", b"}", b"-", b"1e400", b"nan", b"inf", b"\xff\xfe",
         b"\xe9", b"99999999999", b"-7", b"qid:", b"#", b" ", b"0", b"3.5", b"[]", b"\\u0000"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _outcome(fn) -> int:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - mapped exactly as the CLI maps it
        code = exit_code_for(exc)
        if code not in (0, 2):
            raise AssertionError(f"exit {code}: {type(exc).__name__}: {exc}") from exc
        return code
    return 0


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data = data[:pos] + bytes([rng.randrange(256)]) + data[pos + 1:]
        elif op == 1:
            data = data[:pos] + rng.choice(NOISE) + data[pos:]
        elif op == 2 and data:
            data = data[:pos] + data[pos + rng.randint(1, 8):]
        elif op == 3:
            data = data[:pos]
        elif op == 4:
            lines = data.split(b"\n")
            i = rng.randrange(len(lines))
            lines.insert(i, lines[rng.randrange(len(lines))])
            data = b"\n".join(lines)
        else:
            lines = data.split(b"\n")
            rng.shuffle(lines)
            data = b"\n".join(lines)
    return data


def test_fuzz_text_readers(tmp_path: Path):
    rng = random.Random(SEED)
    formats = sorted(TEXT_SEEDS)
    codes = {0: 0, 2: 0}
    for case in range(N_TEXT):
        fmt = formats[case % len(formats)]
        data = _mutate_bytes(TEXT_SEEDS[fmt].encode(), rng)
        folder = tmp_path / str(case)
        folder.mkdir()
        name = {"uci": "docword.f.txt", "tab": "f.tab", "tsv": "f.tsv", "jsonl": "f.jsonl", "svmlight": "f.svm",
                "counts-csv": "f.csv"}[fmt]
        path = folder / name
        path.write_bytes(data)
        inputs = [path]
        if fmt == "uci":
            vocab = folder / "vocab.f.txt"
            vocab.write_bytes(_mutate_bytes(UCI_VOCAB.encode(), rng) if rng.random() < 0.3 else UCI_VOCAB.encode())
            inputs.append(vocab)
        before = {p: _digest(p) for p in inputs}
        fmt_arg = rng.choice([fmt, "auto"])
        try:
            code = _outcome(lambda: build_corpus([str(path)], format=fmt_arg, quiet=True))
        except AssertionError as exc:
            raise AssertionError(f"case {case} ({fmt}, --format {fmt_arg}, seed {SEED}): {exc}\n{data!r}") from None
        codes[code] += 1
        assert all(_digest(p) == d for p, d in before.items()), f"case {case}: input changed"
        shutil.rmtree(folder)
    assert codes[0] > 50 and codes[2] > 200, codes  # both outcomes are exercised


N_NPZ = 400


def _npz_case(path: Path, rng: random.Random) -> None:
    """A small CSR .npz with one random damage: an array's values, length or dtype, the shape or
    format entries, a missing entry, or the file's bytes truncated / flipped (issue 32 item 11)."""
    X = sp.random(6, 5, density=0.5, random_state=rng.randrange(1000), format="csr", dtype=np.float32)
    parts = {"data": X.data, "indices": X.indices, "indptr": X.indptr, "format": np.array(b"csr"),
             "shape": np.array(X.shape)}
    kind = rng.choice(["value", "length", "dtype", "shape", "format", "missing", "bytes", "none"])
    key = rng.choice(["data", "indices", "indptr"])
    if kind == "value" and parts[key].size:
        arr = parts[key].copy()
        arr[rng.randrange(arr.size)] = rng.choice([-1, -10**9, 10**9, 2**31 - 1, np.nan if key == "data" else 7])
        parts[key] = arr
    elif kind == "length":
        parts[key] = parts[key][:rng.randrange(parts[key].size + 1)]
    elif kind == "dtype":
        parts[key] = parts[key].astype(rng.choice([np.complex64, np.float64, np.int8, np.uint64, object]))
    elif kind == "shape":
        parts["shape"] = np.array(rng.choice([(6, 10**9), (10**9, 5), (-1, 5), (6,), (2, 2), (6, 5, 1)]))
    elif kind == "format":
        parts["format"] = np.array(rng.choice([b"csc", b"coo", b"xyz", b""]))
    elif kind == "missing":
        del parts[rng.choice(sorted(parts))]
    np.savez(path, **parts, allow_pickle=True) if kind == "dtype" else np.savez(path, **parts)
    if kind == "bytes":
        path.write_bytes(_mutate_bytes(path.read_bytes(), rng))


def test_fuzz_npz_reader(tmp_path: Path):
    """Damaged SciPy .npz inputs: exit 0 or 2 (a truncated npz was BadZipFile, negative indices an
    IndexError, a (2, 10^9) shape an out-of-memory kill: exit 1 or 137)."""
    rng = random.Random(SEED)
    codes = {0: 0, 2: 0}
    for case in range(N_NPZ):
        path = tmp_path / f"c{case}.npz"
        _npz_case(path, rng)
        before = _digest(path)
        try:
            codes[_outcome(lambda: build_corpus([str(path)], format="npz", quiet=True))] += 1
        except AssertionError as exc:
            raise AssertionError(f"case {case} (seed {SEED}): {exc}") from None
        assert _digest(path) == before, f"case {case}: input changed"
    assert codes[0] > 5 and codes[2] > 50, codes


# ----------------------------------------------------------------------------- HDF5


def _valid(path: Path) -> None:
    rng = np.random.default_rng(0)
    X = sp.random(9, 7, density=0.4, random_state=0, format="csr", dtype=np.float32)
    X.data[:] = rng.uniform(0.1, 1, X.nnz)
    obs = {"label": Categorical(np.arange(9, dtype=np.int32) % 2, np.array(["a", "b"], dtype=object)),
           "qid": np.repeat(np.arange(3, dtype=np.int32), 3)}
    Y = sp.csr_matrix(np.eye(9, 2, dtype=np.float32))
    write_corpus(Corpus(X, None, None, obs, {"df": np.ones(7, np.int64)}, {"labels": Y, "knn_indices": np.zeros((9, 2), np.int32)},
                        {"gputext": {"weighting": "tfidf", "label_names": np.array(["a", "b"], dtype=object)}}), str(path))


def _datasets(f) -> list[str]:
    out = []
    f.visititems(lambda name, obj: out.append(name) if isinstance(obj, h5py.Dataset) else None)
    return out


def _objects(f) -> list[str]:
    out = []
    f.visit(out.append)
    return out


def _damage(f: h5py.File, rng: random.Random) -> None:
    op = rng.randrange(7)
    if op == 0:  # a key deleted
        del f[rng.choice(_objects(f))]
    elif op == 1:  # a dtype swapped
        key = rng.choice(_datasets(f))
        old = f[key][()]
        del f[key]
        kind = rng.randrange(4)
        n = old.shape[0] if getattr(old, "ndim", 0) else 1
        if kind == 0:
            f.create_dataset(key, data=np.array(["x"] * n, dtype=object), dtype=h5py.string_dtype())
        elif kind == 1:
            f.create_dataset(key, data=np.zeros(n, dtype=np.complex64))
        elif kind == 2:
            f.create_dataset(key, data=np.asarray(old).astype(np.float64) + 0.5 if np.asarray(old).dtype.kind in "iuf"
                             else np.zeros(n))
        else:
            f.create_dataset(key, data=np.zeros((n, 2, 2), np.int8))
    elif op == 2:  # a length changed
        key = rng.choice(_datasets(f))
        old = np.asarray(f[key][()])
        del f[key]
        if old.ndim == 0:
            f.create_dataset(key, data=np.zeros(3))
        elif rng.random() < 0.5:
            f.create_dataset(key, data=old[:max(0, len(old) - rng.randint(1, 3))])
        else:
            f.create_dataset(key, data=np.concatenate([old, old[:rng.randint(1, 3)]]) if len(old) else np.zeros(2))
    elif op == 3:  # values damaged
        key = rng.choice([k for k in _datasets(f) if f[k].dtype.kind in "iuf" and f[k].size] or _datasets(f))
        ds = f[key]
        if ds.dtype.kind in "iuf" and ds.size and ds.ndim >= 1:
            values = ds[()]
            flat = values.reshape(-1)
            i = rng.randrange(flat.size)
            flat[i] = rng.choice([-1, 2**31 - 1, -(2**31), 10**6] + ([np.nan, np.inf, 1e30] if ds.dtype.kind == "f" else []))
            if rng.random() < 0.3:
                flat[:] = flat[::-1]
            ds[...] = values
    elif op == 4:  # an attribute damaged
        obj = f[rng.choice(_objects(f) or ["/"])] if rng.random() < 0.7 else f
        keys = list(obj.attrs.keys())
        if keys:
            key = rng.choice(keys)
            obj.attrs[key] = rng.choice([np.array([1, 2, 3]), "csc_matrix", "99", np.array([-1, 5]), 7, b"\xff", "x"])
        if "X" in f and rng.random() < 0.3:
            f["X"].attrs["shape"] = np.array([rng.randint(0, 20), rng.randint(0, 20)])
    elif op == 5:  # a group where a dataset was, or the reverse
        key = rng.choice(_objects(f))
        del f[key]
        if rng.random() < 0.5:
            f.create_group(key)
        else:
            f.create_dataset(key, data=np.arange(4))
    else:  # a stray object
        f.create_dataset(f"obs/stray{rng.randrange(9)}", data=np.arange(rng.randint(0, 12)))


def test_fuzz_hdf5_readers(tmp_path: Path):
    rng = random.Random(SEED + 1)
    valid = tmp_path / "valid.h5"
    _valid(valid)
    raw = valid.read_bytes()
    codes = {0: 0, 2: 0}
    for case in range(N_HDF5):
        path = tmp_path / f"c{case}.h5"
        if rng.random() < 0.1:  # a truncated or byte-damaged file
            cut = rng.randrange(len(raw))
            path.write_bytes(raw[:cut] if rng.random() < 0.5 else raw[:cut] + bytes([rng.randrange(256)]) + raw[cut + 1:])
        else:
            path.write_bytes(raw)
            with h5py.File(path, "a") as f:
                for _ in range(rng.randint(1, 3)):
                    try:
                        _damage(f, rng)
                    except (KeyError, ValueError, TypeError, IndexError):
                        pass  # the damage itself did not apply: the file stays as it is
        digest = _digest(path)

        def rows():
            with CorpusRows(str(path)) as r:
                r.annotations()
                if r.n_docs:
                    r.read(0, r.n_docs)

        def validate():
            problems = corpus_problems(str(path))
            assert all(isinstance(p, str) and "\n" not in p for p in problems)

        outcome = []
        for what, fn in (("read_corpus", lambda: read_corpus(str(path))), ("corpus_info", lambda: corpus_info(str(path))),
                         ("rows", rows)):
            try:
                outcome.append(_outcome(fn))
            except AssertionError as exc:
                raise AssertionError(f"case {case} ({what}, seed {SEED + 1}): {exc}") from None
        try:
            validate()  # validate lists problems; it never raises
        except Exception as exc:
            raise AssertionError(f"case {case} (corpus_problems, seed {SEED + 1}): {type(exc).__name__}: {exc}") from None
        if outcome[0] == 0 and corpus_problems(str(path)):
            pass  # validate is stricter than the reader (duplicate ids, digests): allowed
        codes[outcome[0]] += 1
        assert _digest(path) == digest, f"case {case}: input changed"
        os.unlink(path)
    assert codes[0] > 20 and codes[2] > 100, codes
