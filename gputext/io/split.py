"""`gputext corpus split`: seeded, stratified train/test splits and k folds of a corpus.

Units and strata:
- A learning-to-rank corpus (obs/qid present) is split by query: all rows of a qid go to the
  same part. Queries are shuffled, not stratified. ``test_size`` then counts queries.
- Otherwise documents are stratified by obs/label (for multi-label corpora obs/label is the
  first label); unlabelled documents (code -1) form one more stratum. No labels: one stratum.

Hold-out (``test_size``: a float in (0, 1) is a fraction, an int >= 1 a number of units):
    n_test = ceil(test_size * n) (as scikit-learn), split over strata by largest remainder of
    n_test * n_c / n (exact integer arithmetic; ties to the stratum listed first: lower label
    code, unlabelled last), each stratum keeping at least one unit in train when it has two or
    more, and a stratum of one unit going to train. Inside a stratum, the units moved to test are
    the first ones of a permutation drawn from numpy's default_rng(seed); strata are visited in
    order, so the same seed gives the same split.
Folds (``n_folds`` = k >= 2): every stratum is permuted, the permutations are concatenated in
    stratum order and unit i of that list goes to fold (i mod k): every stratum is spread evenly
    (fold sizes differ by at most one per stratum) and fold sizes differ by at most one overall.
    Fold f's test part is fold f, its train part the other folds.

Rows keep their original order inside each part (so qid runs stay contiguous). Every part is a
full corpus with the same vocabulary, var (reference df/idf: the weights were computed on the
whole corpus and are not recomputed) and labels categories, plus uns/gputext/split describing it.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..errors import InputError
from ..progress import progress
from .corpus import Corpus, read_corpus, write_corpus
from .ingest import int_or_float


def parse_test_size(value):
    """'0.2' -> 0.2 (fraction), '100' -> 100 (count)."""
    value = int_or_float(value, "--test-size", "a fraction in (0, 1) or a count >= 1")
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if value < 1:
            raise InputError(f"--test-size {value}: a count must be >= 1")
        return int(value)
    if isinstance(value, (float, np.floating)) and 0.0 < float(value) < 1.0:
        return float(value)
    raise InputError(f"--test-size {value!r}: expected a fraction in (0, 1) or a count >= 1")


def _units(corpus: Corpus) -> tuple[list[np.ndarray] | None, int, list[np.ndarray], str]:
    """(rows of each unit or None when units are documents, number of units, strata as arrays of
    unit numbers, 'query'|'document')."""
    if "qid" in corpus.obs:
        qid = np.asarray(corpus.obs["qid"])
        uniq, first = np.unique(qid, return_index=True)
        order = uniq[np.argsort(first, kind="stable")]  # queries in order of first appearance
        rows_of = {q: [] for q in order.tolist()}
        for i, q in enumerate(qid.tolist()):
            rows_of[q].append(i)
        units = [np.asarray(rows_of[q], dtype=np.int64) for q in order.tolist()]
        return units, len(units), [np.arange(len(units))], "query"
    labels = corpus.labels
    if labels is None:
        return None, corpus.n_docs, [np.arange(corpus.n_docs)], "document"
    codes = np.asarray(labels.codes)
    strata = [np.nonzero(codes == c)[0] for c in range(len(labels.categories))]
    strata.append(np.nonzero(codes < 0)[0])
    return None, corpus.n_docs, [s for s in strata if len(s)], "document"


def holdout_units(strata: list[np.ndarray], test_size, seed: int) -> np.ndarray:
    """Sorted unit numbers that go to test (see the module docstring for the rule)."""
    n = int(sum(len(s) for s in strata))
    # ceil, ignoring float noise (0.7 * 10 = 7.000000000000001 must give 7)
    n_test = math.ceil(test_size * n - 1e-9) if isinstance(test_size, float) else int(test_size)
    if not 1 <= n_test <= n - 1:
        raise InputError(f"--test-size {test_size} gives {n_test} test units out of {n}: expected between 1 and {n - 1}")
    sizes = np.array([len(s) for s in strata], dtype=np.int64)
    caps = np.where(sizes >= 2, sizes - 1, 0)
    take = np.minimum((n_test * sizes) // n, caps)
    remainder = (n_test * sizes) % n
    order = sorted(range(len(strata)), key=lambda c: (-int(remainder[c]), c))
    missing = n_test - int(take.sum())
    while missing > 0:
        progressed = False
        for c in order:
            if missing == 0:
                break
            if take[c] < caps[c]:
                take[c] += 1
                missing -= 1
                progressed = True
        if not progressed:
            break
    if take.sum() == 0:
        raise InputError("cannot put any document in the test part: every stratum (class) has a single document")
    rng = np.random.default_rng(seed)
    test = [rng.permutation(s)[:k] for s, k in zip(strata, take.tolist())]
    return np.sort(np.concatenate(test)).astype(np.int64)


def fold_assignment(strata: list[np.ndarray], n_folds: int, seed: int, n_units: int) -> np.ndarray:
    """(n_units,) int64 fold number 0..k-1 of every unit."""
    if n_folds < 2:
        raise InputError(f"--folds {n_folds}: expected at least 2 folds")
    if n_folds > n_units:
        raise InputError(f"--folds {n_folds}: the corpus has only {n_units} units to split")
    rng = np.random.default_rng(seed)
    ordered = np.concatenate([rng.permutation(s) for s in strata])
    fold = np.empty(n_units, dtype=np.int64)
    fold[ordered] = np.arange(len(ordered)) % n_folds
    return fold


def _rows(units: list[np.ndarray] | None, chosen: np.ndarray) -> np.ndarray:
    if units is None:
        return np.sort(chosen).astype(np.int64)
    if len(chosen) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.concatenate([units[u] for u in chosen.tolist()]))


def _part(corpus: Corpus, rows: np.ndarray, info: dict) -> Corpus:
    part = corpus.take(rows)
    part.params["split"] = dict(info, n_docs=int(len(rows)))
    return part


def split_corpus(corpus: Corpus, test_size=0.2, seed: int = 0, source: str = "") -> tuple[Corpus, Corpus]:
    """(train, test) corpora of a seeded, stratified hold-out split."""
    test_size = parse_test_size(test_size)
    units, n_units, strata, unit = _units(corpus)
    test_units = holdout_units(strata, test_size, seed)
    train_units = np.setdiff1d(np.arange(n_units), test_units)
    base = {"source": source, "seed": int(seed), "test_size": test_size, "unit": unit}
    return (_part(corpus, _rows(units, train_units), dict(base, part="train")),
            _part(corpus, _rows(units, test_units), dict(base, part="test")))


def fold_corpora(corpus: Corpus, n_folds: int, seed: int = 0, source: str = ""):
    """[(train, test)] for each of ``n_folds`` stratified folds."""
    units, n_units, strata, unit = _units(corpus)
    fold = fold_assignment(strata, int(n_folds), seed, n_units)
    out = []
    for f in range(n_folds):
        base = {"source": source, "seed": int(seed), "folds": int(n_folds), "fold": f + 1, "unit": unit}
        out.append((_part(corpus, _rows(units, np.nonzero(fold != f)[0]), dict(base, part="train")),
                    _part(corpus, _rows(units, np.nonzero(fold == f)[0]), dict(base, part="test"))))
    return out


def split_targets(out_dir: str, folds: int | None = None) -> list[str]:
    """The files write_split writes: out_dir/train.h5 and test.h5, or out_dir/foldF/{train,test}.h5."""
    folders = [out_dir] if not folds or folds < 1 else [os.path.join(out_dir, f"fold{f + 1}") for f in range(folds)]
    return [os.path.join(folder, name) for folder in folders for name in ("train.h5", "test.h5")]


def write_split(path: str, out_dir: str, test_size=0.2, folds: int | None = None, seed: int = 0,
                quiet: bool = True) -> list[str]:
    """Split the corpus at ``path`` into ``out_dir``; returns the files written.

    Hold-out: out_dir/train.h5, out_dir/test.h5. Folds: out_dir/fold1/train.h5, .../fold1/test.h5, ...
    If any write fails, every file (and folder) this call created is removed again.
    """
    if out_dir != "-" and os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError(f"-o {out_dir}: exists and is not a directory (split writes train.h5 and test.h5 into a folder)")
    if out_dir == "-":
        raise InputError("-o -: split writes several files; give a directory")
    corpus = read_corpus(path)
    source = os.path.abspath(path) if path != "-" else "-"
    if folds is not None:
        pairs = fold_corpora(corpus, folds, seed, source)
        targets = [(os.path.join(out_dir, f"fold{f + 1}"), pair) for f, pair in enumerate(pairs)]
    else:
        targets = [(out_dir, split_corpus(corpus, test_size, seed, source))]
    written: list[str] = []
    made: list[str] = []
    try:
        with progress(2 * len(targets), "writing", quiet) as bar:
            for folder, (train, test) in targets:
                missing = []
                probe = os.path.abspath(folder)
                while not os.path.exists(probe):
                    missing.append(probe)
                    probe = os.path.dirname(probe)
                os.makedirs(folder, exist_ok=True)
                made.extend(reversed(missing))
                for name, part in (("train.h5", train), ("test.h5", test)):
                    target = os.path.join(folder, name)
                    write_corpus(part, target)
                    written.append(target)
                    bar.update(1)
    except BaseException:
        for target in written:
            if os.path.exists(target):
                os.unlink(target)
        for folder in reversed(made):
            try:
                os.rmdir(folder)
            except OSError:
                pass
        raise
    return written
