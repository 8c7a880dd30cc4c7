"""gputext.distributed on a LocalCluster of worker processes: results identical to the single-process
engine for 1, 2 and 3 shards (one per worker process) in kNN search (every metric, k up to 300,
exclude_self), the grouped selector and meta-features, the star graph and RankSVM; a worker killed
mid-run; the one-line errors; the CLI's --scheduler. One cluster of 3 workers for the module
(start-up costs seconds); skipped without dask."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")

from click.testing import CliRunner  # noqa: E402

from gputext.cli import cli  # noqa: E402
from gputext.distributed import DistributedIndex  # noqa: E402
from gputext.engine import Index, search_threshold, search_topk, search_topk_grouped  # noqa: E402
from gputext.errors import InputError  # noqa: E402
from gputext.io.corpus import Categorical, Corpus, read_corpus, write_corpus  # noqa: E402

METRICS = ("cosine", "dot", "l2", "l1")


@pytest.fixture(scope="module")
def client():
    from gputext.distributed.client import local_cluster
    cluster, _ = local_cluster(3)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def corpus_matrix(n=320, n_terms=40, seed=0) -> sp.csr_matrix:
    """Weights on a coarse grid and repeated rows: many exact ties, across shard boundaries too."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, n_terms, density=0.12, format="csr", dtype=np.float32, random_state=seed)
    X.data = (np.round(X.data * 4) / 4 * rng.choice([-1, 1], X.nnz, p=[0.2, 0.8])).astype(np.float32)
    X.eliminate_zeros()
    rows = np.arange(n)
    rows[1::7] = rows[0::7][: len(rows[1::7])]  # duplicates: documents 7j and 7j+1 are equal
    return sp.csr_matrix(X[rows])


@pytest.fixture(scope="module")
def X():
    return corpus_matrix()


@pytest.fixture(scope="module")
def Q():
    return corpus_matrix(37, seed=5)


def same_csr(a, b):
    return (a.shape == b.shape and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.data, b.data))


@pytest.mark.parametrize("n_shards", [1, 2, 3])
def test_knn_every_metric_identical(client, X, Q, n_shards):
    index = Index.from_csr(X)
    with DistributedIndex.from_csr(X, client, n_shards=n_shards) as d:
        assert len(d.shards) == n_shards and len({s.worker for s in d.shards}) == n_shards
        for metric in METRICS:
            for queries, k, exclude in ((Q, 300, False), (X, 9, True)):
                want = search_topk(index, queries, k, metric, "cpu", exclude_self=exclude)
                got = d.search_topk(queries, k, metric, "cpu", exclude_self=exclude, batch_size=160)
                assert np.array_equal(want[0], got[0]), (metric, k)
                assert np.array_equal(want[1], got[1], equal_nan=True), (metric, k)
        want = search_threshold(index, X, 0.3, "cosine", "cpu", exclude_self=True, after=np.arange(X.shape[0]))
        got = d.search_threshold(X, 0.3, "cosine", "cpu", exclude_self=True, after=np.arange(X.shape[0]),
                                 batch_size=100)
        assert same_csr(want, got) and want.nnz > 0


@pytest.mark.parametrize("n_shards", [1, 3])
def test_grouped_selector_identical(client, X, Q, n_shards):
    y = np.random.default_rng(1).integers(0, 5, X.shape[0])
    y[y == 4] = 3  # group 4 empty
    y[np.nonzero(y == 2)[0][3:]] = 1  # group 2 smaller than k
    order = np.argsort(y, kind="stable")
    groups = np.concatenate([[0], np.cumsum(np.bincount(y, minlength=5))])
    Xo = X[order]
    with DistributedIndex.from_csr(Xo, client, n_shards=n_shards) as d:
        for pad in ("nan", "last"):
            want = search_topk_grouped(Index.from_csr(Xo), Q, 6, groups, ("cosine", "l1", "l2", "dot"), "cpu", pad=pad)
            got = d.search_topk_grouped(Q, 6, groups, ("cosine", "l1", "l2", "dot"), "cpu", pad=pad)
            assert np.array_equal(want[0], got[0], equal_nan=True)
            # docs: identical except in runs of equal float32 scores (their float64 keys may differ)
            s = want[0]
            tied = np.zeros(s.shape, bool)
            tied[..., 1:] |= s[..., 1:] == s[..., :-1]
            tied[..., :-1] |= s[..., 1:] == s[..., :-1]
            assert np.array_equal(np.where(tied, 0, want[1]), np.where(tied, 0, got[1]))


def test_metafeatures_identical(client, X, Q):
    from gputext.knn.metafeatures import compute_metafeatures
    y = np.random.default_rng(2).integers(-1, 4, X.shape[0])
    y[y == 3] = 2  # class 3 empty
    want = compute_metafeatures(X, y, 4, Q, k=5, method="inverted", device="cpu")
    got = compute_metafeatures(X, y, 4, Q, k=5, device="cpu", client=client)
    assert np.array_equal(want.train, got.train) and np.array_equal(want.queries, got.queries)


@pytest.mark.parametrize("n_shards", [1, 2, 3])
def test_metafeatures_from_the_file_identical(client, X, Q, tmp_path, n_shards):
    """train_path: each worker reads its rows and orders them by class itself (nothing shipped but
    labels); unlabelled rows and an empty class; the training rows' own meta-features too."""
    from gputext.knn.metafeatures import compute_metafeatures
    y = np.random.default_rng(3).integers(-1, 4, X.shape[0])
    y[y == 3] = 2  # class 3 empty
    path = str(tmp_path / "train.h5")
    write_corpus(Corpus(X), path)
    want = compute_metafeatures(X, y, 4, Q, k=5, method="inverted", device="cpu")
    index = DistributedIndex.from_path(path, client, n_shards=n_shards, labels=y, n_classes=4)
    try:
        assert index.n_docs == int((y >= 0).sum()) and [s.docs for s in index.shards][-1][1] == index.n_docs
        with pytest.raises(InputError, match="grouped searches only"):
            index.search_threshold(Q, 0.5)
    finally:
        index.close()
    got = compute_metafeatures(X, y, 4, Q, k=5, device="cpu", client=client, train_path=path)
    assert np.array_equal(want.train, got.train) and np.array_equal(want.queries, got.queries)
    other = X.copy()
    other.data[0] = 0
    other.eliminate_zeros()
    with pytest.raises(InputError, match="not the file it was read from"):
        compute_metafeatures(other, y, 4, Q, k=5, device="cpu", client=client, train_path=path)
    with pytest.raises(InputError, match="labels for 319 documents"):
        compute_metafeatures(X[:-1], y[:-1], 4, Q, k=5, device="cpu", client=client, train_path=path)


def test_star_graph_and_clusters_identical(client, X):
    from gputext.cluster.star import cluster_star
    want = cluster_star(X, 0.3, "cpu", shards=3, batch_size=50)
    got = cluster_star(X, 0.3, "cpu", shards=3, batch_size=50, client=client)
    assert got.stats["graph_dask_shards"] == 3 and got.stats["graph_shards"] == 3
    for name in ("indptr", "indices", "weights", "degree", "weight_sum"):
        assert np.array_equal(getattr(want.graph, name), getattr(got.graph, name)), name
    assert np.array_equal(want.centers, got.centers) and same_csr(want.membership, got.membership)


def rank_data(seed=3):
    """80 queries of 2..29 documents, real-valued features (inexact sums): 7 query blocks."""
    from gputext.rank.data import prepare
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 30, 80)
    qid = np.repeat(np.arange(80), sizes)
    n = qid.size
    Xr = sp.random(n, 12, density=0.5, format="csr", dtype=np.float32, random_state=seed)
    rel = rng.integers(0, 4, n).astype(np.float64)
    return prepare(Xr, qid, rel)


@pytest.fixture(scope="module")
def ranksvm_single_process():
    data = rank_data()
    from gputext.rank.api import train_data
    return data, train_data(data, C=0.5, eps=1e-6, device="cpu")


@pytest.mark.parametrize("n_parts", [1, 2, 3])
def test_ranksvm_bit_identical_for_any_number_of_parts(client, ranksvm_single_process, n_parts):
    # each part returns its query blocks' partial sums and the client adds them in block order, as
    # the single process does: same loss, gradient, Hessian products, iterates and weights
    from gputext.distributed.rank import DistributedRankOps
    from gputext.rank.objective import RankObjective
    from gputext.rank.tron import tron
    data, want = ranksvm_single_process
    ops = DistributedRankOps(client, data, "cpu", n_parts=n_parts)
    assert ops.n_parts == n_parts and len(set(ops.workers)) == n_parts
    try:
        got = tron(RankObjective(data, 0.5, ops=ops), data.n_features, eps=1e-6)
    finally:
        ops.close()
    assert np.array_equal(got.w, want.w) and got.iterations == want.iterations
    assert got.cg_iterations == want.cg_iterations and got.f == want.objective


@pytest.fixture(scope="module")
def rank_file(tmp_path_factory):
    """rank_data's rows written to a corpus file in a shuffled order (so each part's rows are
    many runs of the file), and the RankingData read back from it."""
    from gputext.io.corpus import read_corpus
    from gputext.rank.data import from_corpus
    grouped = rank_data()
    order = np.random.default_rng(11).permutation(grouped.n_docs)
    qid = np.repeat(grouped.query_ids, np.diff(grouped.starts))[order]
    rel = grouped.levels[grouped.label_rank][order]
    path = str(tmp_path_factory.mktemp("rank") / "train.h5")
    write_corpus(Corpus(grouped.X[order], obs={"qid": qid, "relevance": rel}), path)
    return path, from_corpus(read_corpus(path), path)


def test_a_file_part_is_the_shipped_part_bit_for_bit(rank_file):
    from gputext.distributed.rank import FilePart, part_of, row_runs
    path, data = rank_file
    assert row_runs(np.array([4, 5, 6, 9, 2, 3])) == [(4, 7), (9, 10), (2, 4)]
    for q_lo, q_hi in ((0, 80), (3, 41), (41, 80)):
        got, want = FilePart(path, data, q_lo, q_hi).load(), part_of(data, q_lo, q_hi)
        assert len(FilePart(path, data, q_lo, q_hi).runs) > 1  # shuffled: many pieces of the file
        assert same_csr(got.X, want.X) and got.n_pairs == want.n_pairs
        for name in ("starts", "query_ids", "label_rank", "levels", "perm"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), name


@pytest.mark.parametrize("n_parts", [2, 3])
def test_ranksvm_parts_read_from_the_file_bit_identical(client, rank_file, n_parts):
    """Workers that see the training file read their parts from it (rank train --scheduler passes
    it): the single process's weights bit for bit, as when the parts are shipped."""
    from gputext.distributed.rank import DistributedRankOps
    from gputext.rank.api import train_data
    from gputext.rank.objective import RankObjective
    from gputext.rank.tron import tron
    path, data = rank_file
    want = train_data(data, C=0.5, eps=1e-6, device="cpu")
    ops = DistributedRankOps(client, data, "cpu", n_parts=n_parts, source=path)
    assert ops.from_file and ops.n_parts == n_parts
    try:
        got = tron(RankObjective(data, 0.5, ops=ops), data.n_features, eps=1e-6)
    finally:
        ops.close()
    assert np.array_equal(got.w, want.w) and got.iterations == want.iterations and got.f == want.objective
    missing = DistributedRankOps(client, data, "cpu", n_parts=n_parts, source=path + ".nowhere")
    assert not missing.from_file  # a file the workers do not see: the parts are shipped
    missing.close()


def test_worker_killed_mid_run_same_result(client, X, Q, tmp_path):
    path = str(tmp_path / "corpus.h5")
    write_corpus(Corpus(X), path)
    want = search_topk(Index.from_csr(X), Q, 20, "l2", "cpu")
    with DistributedIndex.from_path(path, client) as d:
        pids = client.run(os.getpid)
        victim = pids[d.shards[0].worker]
        out = {}
        search = lambda: out.update(r=d.search_topk(Q, 20, "l2", "cpu", batch_size=1))
        runner = threading.Thread(target=search)
        runner.start()
        time.sleep(0.2)
        mid_run = runner.is_alive()  # usually: 39 batches x 3 shards of tasks
        os.kill(victim, signal.SIGKILL)
        runner.join(timeout=240)
        assert not runner.is_alive()
        if not mid_run:  # the search beat the kill on this machine: the next one finds the worker gone
            out.clear()
            search()
    assert np.array_equal(want[0], out["r"][0]) and np.array_equal(want[1], out["r"][1], equal_nan=True)
    client.wait_for_workers(3, timeout=120)  # the nanny restarts the worker for the next tests


def test_unreadable_shard_is_one_line(client, X, tmp_path):
    path = str(tmp_path / "gone.h5")
    write_corpus(Corpus(X), path)
    d = DistributedIndex.from_path(path, client)
    d.close()  # the workers forget the shards: the next search reads the file again
    os.remove(path)
    with pytest.raises(InputError, match=r"shard rows \[\d+, \d+\) of .*gone.h5 cannot be read on worker tcp://"):
        d.search_topk(X[:3], 2)


def test_no_worker_is_one_line(monkeypatch):
    from gputext.distributed import run
    monkeypatch.setattr(run, "NO_WORKER_GRACE_S", 0.5)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as c:
            with pytest.raises(InputError, match="the Dask cluster has no worker"):
                DistributedIndex.from_csr(sp.csr_matrix(np.eye(3, dtype=np.float32)), c)
    from gputext.distributed.client import parse_local
    with pytest.raises(InputError, match="local:N with N >= 1"):
        parse_local("local:0")


@pytest.fixture(scope="module")
def files(tmp_path_factory, X, Q):
    d = tmp_path_factory.mktemp("dask_cli")
    terms = np.array([f"t{i}" for i in range(X.shape[1])], dtype=object)
    y = np.random.default_rng(4).integers(0, 3, X.shape[0])
    train = Corpus(X, terms=terms, obs={"label": Categorical(y, np.array(["a", "b", "c"], dtype=object))})
    write_corpus(train, str(d / "train.h5"))
    write_corpus(Corpus(Q, terms=terms, obs={"label": Categorical(y[:Q.shape[0]], np.array(["a", "b", "c"], dtype=object))}),
                 str(d / "test.h5"))
    return d


def run_cli(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_cli_knn_search_local_2(files):
    d = files
    run_cli("knn", "search", "--index", d / "train.h5", "--queries", d / "test.h5", "-k", 25, "--metric", "l1",
            "--device", "cpu", "-o", d / "one.h5", "-q")
    run_cli("knn", "search", "--index", d / "train.h5", "--queries", d / "test.h5", "-k", 25, "--metric", "l1",
            "--device", "cpu", "--scheduler", "local:2", "-o", d / "two.h5", "-q")
    a, b = read_corpus(str(d / "one.h5")), read_corpus(str(d / "two.h5"))
    for key in ("knn_indices", "knn_scores"):
        assert np.array_equal(a.obsm[key], b.obsm[key], equal_nan=True)


def test_cli_families_on_a_scheduler_address(client, files):
    d = files
    address = client.scheduler.address
    for args in (("cluster", "star", d / "train.h5", "--beta", 0.3), ("knn", "metafeatures", "--train", d / "train.h5",
                                                                        "--test", d / "test.h5", "-k", 4)):
        run_cli(*args, "--device", "cpu", "-o", d / "a.h5", "-q")
        run_cli(*args, "--device", "cpu", "--scheduler", address, "-o", d / "b.h5", "-q")
        a, b = read_corpus(str(d / "a.h5")), read_corpus(str(d / "b.h5"))
        for key in a.obsm:
            A, B = a.obsm[key], b.obsm[key]
            assert same_csr(A, B) if sp.issparse(A) else np.array_equal(A, B), key
    out = run_cli("knn", "classify", "--train", d / "train.h5", "--test", d / "test.h5", "-k", 5, "--scheduler",
                  address, "--device", "cpu")
    ref = run_cli("knn", "classify", "--train", d / "train.h5", "--test", d / "test.h5", "-k", 5, "--device", "cpu")
    assert out.output.splitlines()[-1] == ref.output.splitlines()[-1]  # the F1 line
    bad = CliRunner().invoke(cli, ["knn", "search", "--index", str(d / "train.h5"), "--exclude-self", "-k", "3",
                                   "--scheduler", "local:x", "-o", str(d / "c.h5")])
    assert bad.exit_code == 2 and "local:N with N >= 1" in bad.output


@pytest.mark.gpu
def test_gpu_worker_identical_to_the_direct_engine():
    """One worker on the GPU (local:1: dask-cuda or CUDA_VISIBLE_DEVICES) == the direct engine on cuda."""
    from gputext.distributed import connect
    X, Q = corpus_matrix(3000, 500, seed=7), corpus_matrix(200, 500, seed=8)
    want = search_topk(Index.from_csr(X), Q, 30, "cosine", "cuda")
    with connect("local:1") as c:
        with DistributedIndex.from_csr(X, c) as d:
            got = d.search_topk(Q, 30, "cosine", "cuda")
            grouped = d.search_topk_grouped(Q, 5, np.array([0, 1000, 3000]), ("cosine", "l2"), "cuda", pad="last")
    assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1], equal_nan=True)
    direct = search_topk_grouped(Index.from_csr(X), Q, 5, np.array([0, 1000, 3000]), ("cosine", "l2"), "cuda",
                                 pad="last")
    assert np.array_equal(direct[0], grouped[0])


@pytest.mark.gpu
def test_ranksvm_gpu_parts_bit_identical_to_one_gpu():
    """RankSVM's device ops cut into 3 parts (on one GPU worker: local:1) give the single process's
    weights on the GPU bit for bit (dense and sparse X: the two X^T u kernels)."""
    from gputext.distributed import connect
    from gputext.distributed.rank import DistributedRankOps
    from gputext.rank.api import train_data
    from gputext.rank.data import prepare
    from gputext.rank.objective import RankObjective
    from gputext.rank.tron import tron
    rng = np.random.default_rng(5)
    qid = np.repeat(np.arange(300), rng.integers(5, 60, 300))
    rel = rng.integers(0, 5, qid.size).astype(np.float64)
    dense = sp.csr_matrix(rng.normal(size=(qid.size, 20)).astype(np.float32))
    sparse = sp.random(qid.size, 20, density=0.4, format="csr", dtype=np.float32, random_state=5)
    with connect("local:1") as c:
        for X in (dense, sparse):
            data = prepare(X, qid, rel)
            want = train_data(data, C=1.0, eps=1e-6, device="cuda")
            ops = DistributedRankOps(c, data, "cuda", n_parts=3)
            try:
                got = tron(RankObjective(data, 1.0, ops=ops), data.n_features, eps=1e-6)
            finally:
                ops.close()
            assert ops.n_parts == 3 and np.array_equal(got.w, want.w) and got.iterations == want.iterations
