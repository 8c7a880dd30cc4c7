"""A Dask cluster started the way users start one: a `dask scheduler` process and two `dask worker`
processes (CPU, one thread each, working directories of their own), on 127.0.0.1 with a random
port; `gputext ... --scheduler tcp://127.0.0.1:PORT` then gives the single process's results
(knn search with relative paths from another folder: the workers read the corpus from its absolute
path; rank train: the same weights bit for bit). Also: a server that accepts
connections and never speaks is one line and exit code 2 within the connect timeout (issue 32
item 8). The processes are started in sessions of their own and stopped, with their children,
when the module ends; every wait is bounded. Skipped without dask."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")

from click.testing import CliRunner  # noqa: E402

from gputext.cli import cli  # noqa: E402
from gputext.io.corpus import Corpus, read_corpus, write_corpus  # noqa: E402
from gputext.rank.model import RankModel  # noqa: E402

DASK = Path(sys.executable).with_name("dask")
START_TIMEOUT_S = 90
DOC = Path(__file__).resolve().parents[1] / "docs" / "distributed.md"


def doc_recipe(name: str) -> str:
    """The fenced block after ``<!-- recipe: NAME -->`` in docs/distributed.md."""
    match = re.search(rf"<!-- recipe: {re.escape(name)} -->\n```\w*\n(.*?)```", DOC.read_text(), re.S)
    assert match, f"docs/distributed.md has no recipe {name!r}"
    return match.group(1)


def kubernetes_worker_args() -> list[str]:
    """The worker's arguments after the scheduler address in the documented Kubernetes manifest."""
    import yaml
    for doc in yaml.safe_load_all(doc_recipe("kubernetes")):
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "gputext-worker":
            command = doc["spec"]["template"]["spec"]["containers"][0]["command"]
            assert command[:2] == ["dask", "worker"] and command[2].startswith("tcp://"), command
            return [str(x) for x in command[3:]]
    raise AssertionError("no gputext-worker Deployment in the manifest")


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to each started process's session (the worker's nanny has a child), SIGKILL after 20 s."""
    for p in reversed(procs):
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in reversed(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def _start(args, folder: Path, name: str) -> subprocess.Popen:
    folder.mkdir(exist_ok=True)
    env = {**os.environ, "GPUTEXT_WORKER_THREADS": "1"}
    with open(folder / f"{name}.log", "wb") as log:
        return subprocess.Popen([str(DASK), *map(str, args)], cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


@pytest.fixture(scope="module")
def scheduler_address(tmp_path_factory):
    """tcp://127.0.0.1:PORT of a hand-started scheduler with two hand-started workers."""
    if not DASK.exists():
        pytest.skip(f"no dask command next to {sys.executable}")
    d = tmp_path_factory.mktemp("hand_started")
    info_file = d / "scheduler.json"
    procs = [_start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", info_file,
                     "--idle-timeout", "600"], d / "scheduler", "scheduler")]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not info_file.exists() or not info_file.read_text().strip():
            assert procs[0].poll() is None and time.monotonic() < deadline, (d / "scheduler" / "scheduler.log").read_text()
            time.sleep(0.2)
        time.sleep(0.2)  # the file is written in one go; let it settle
        address = json.loads(info_file.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        for i in range(2):  # the documented Kubernetes worker's command line
            procs.append(_start(["worker", address, *kubernetes_worker_args()], d / f"worker{i}", "worker"))
        with distributed.Client(address, timeout=30) as c:
            c.wait_for_workers(2, timeout=START_TIMEOUT_S)
        yield address
    finally:
        _stop(procs)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """train.h5 / test.h5 (tf-idf-like rows) and ltr.h5 (qid, relevance: 60 queries, 7 query blocks)."""
    d = tmp_path_factory.mktemp("hand_started_files")
    rng = np.random.default_rng(8)
    X = sp.random(400, 50, density=0.1, format="csr", dtype=np.float32, random_state=8)
    write_corpus(Corpus(X), str(d / "train.h5"))
    write_corpus(Corpus(X[:40]), str(d / "test.h5"))
    sizes = rng.integers(2, 40, 60)
    qid = np.repeat(np.arange(60), sizes)
    Xr = sp.random(qid.size, 10, density=0.6, format="csr", dtype=np.float32, random_state=9)
    write_corpus(Corpus(Xr, obs={"qid": qid, "relevance": rng.integers(0, 4, qid.size).astype(np.float64)}),
                 str(d / "ltr.h5"))
    return d


def run_cli(*args) -> None:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert res.exit_code == 0, res.output


def test_knn_search_with_relative_paths(scheduler_address, files, monkeypatch):
    # the command runs in the data folder, the workers in folders of their own: they read the corpus
    # through the absolute path the client resolved (a path every worker sees), not shipped rows
    monkeypatch.chdir(files)
    common = ["knn", "search", "--index", "train.h5", "--queries", "test.h5", "-k", 7, "--device", "cpu", "-q"]
    run_cli(*common, "-o", "one.h5")
    run_cli(*common, "--scheduler", scheduler_address, "-o", "two.h5")
    a, b = read_corpus(str(files / "one.h5")), read_corpus(str(files / "two.h5"))
    for key in ("knn_indices", "knn_scores"):
        assert np.array_equal(a.obsm[key], b.obsm[key], equal_nan=True), key


def test_rank_train_same_weights_bit_for_bit(scheduler_address, files):
    # 4 Newton steps (every TRON quantity goes through the workers' block sums; tests/test_distributed.py
    # trains to convergence)
    for out, extra in (("m1.h5", []), ("m2.h5", ["--scheduler", scheduler_address])):
        run_cli("rank", "train", files / "ltr.h5", "-C", 1, "--eps", "1e-6", "--max-iter", 4, "--device", "cpu", "-q",
                "-o", files / out, *extra)
    one, two = RankModel.load(str(files / "m1.h5")), RankModel.load(str(files / "m2.h5"))
    assert np.array_equal(one.w, two.w) and one.iterations == two.iterations and one.objective == two.objective


@pytest.mark.parametrize("answer,message", [(None, "did not complete Dask's handshake within 2 s"),
                                            (b"HTTP/1.1 200 OK\r\n\r\n" + bytes(range(256)), "cannot talk to a Dask scheduler at")])
def test_server_that_is_not_dask_is_one_line_and_exit_2(monkeypatch, tmp_path, answer, message):
    # issue 32: a server that accepts and never speaks hung Client() for 240 s and more (item 8); one
    # that answers something else gave "Unable to allocate 3.07 EiB" and exit 1 (item 11)
    from gputext.distributed import client as dask_client
    monkeypatch.setattr(dask_client, "CONNECT_TIMEOUT_S", 2)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn = server.accept()[0]
            except OSError:
                continue
            accepted.append(conn)
            if answer is not None:
                conn.sendall(answer)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        t0 = time.monotonic()
        res = CliRunner().invoke(cli, ["knn", "search", "--index", str(tmp_path / "missing.h5"), "-k", "3",
                                       "--exclude-self", "--scheduler", f"tcp://127.0.0.1:{server.getsockname()[1]}",
                                       "-o", str(tmp_path / "o.h5")])
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        thread.join(timeout=5)
        for c in accepted:
            c.close()
        server.close()
    assert accepted, "the server was never contacted"
    assert res.exit_code == 2 and elapsed < 15, (res.exit_code, elapsed, res.output)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.output


def test_slurm_recipe_renders_its_job_script_and_the_script_starts_a_worker(files, tmp_path):
    pytest.importorskip("dask_jobqueue")
    import dask
    from gputext.rank.api import train
    recipe = doc_recipe("slurm")
    constructor = recipe[:recipe.index("cluster.scale")]  # no sbatch here: the rest submits jobs
    scope: dict = {}
    with dask.config.set({"jobqueue.slurm.scheduler-options": {"host": "127.0.0.1", "dashboard_address": ":0"}}):
        exec(constructor, scope)
    cluster = scope["cluster"]
    procs = []
    try:
        script = cluster.job_script()
        shown = doc_recipe("slurm job script").replace("PYTHON", sys.executable)
        assert script.strip() == shown.replace("tcp://LOGIN:PORT", cluster.scheduler_address).strip()
        (tmp_path / "job.sh").write_text(script)
        with open(tmp_path / "job.log", "wb") as log:  # what SLURM would run on a compute node
            procs.append(subprocess.Popen(["bash", str(tmp_path / "job.sh")], cwd=tmp_path, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        with distributed.Client(cluster) as client:
            client.wait_for_workers(1, timeout=START_TIMEOUT_S)
            corpus = read_corpus(str(files / "ltr.h5"))
            got = train(corpus, C=1.0, eps=1e-6, max_iter=4, device="cpu", client=client)
        want = train(corpus, C=1.0, eps=1e-6, max_iter=4, device="cpu")
        assert np.array_equal(got.w, want.w) and got.iterations == want.iterations
    finally:
        _stop(procs)
        cluster.close()
