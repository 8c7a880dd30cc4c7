"""Getting a dask.distributed Client from what the user typed: ``--scheduler ADDRESS|local:N``.

``local:N`` starts a cluster on this machine: one worker per GPU through dask-cuda's
LocalCUDACluster when dask-cuda is installed and N <= the GPUs numba sees, else a LocalCluster of N
worker processes, one task at a time each (the engine runs its own threads: numba's threads are
split between the workers). ADDRESS is a running ``dask scheduler`` (``tcp://host:8786``). A
Client object is used as given. The cluster started here is closed when the ``with`` ends.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

from ..errors import InputError
from ..progress import info

CONNECT_TIMEOUT_S = 30
"""Seconds to reach a scheduler address and complete Dask's handshake, in total."""
THREADS_VARIABLE = "GPUTEXT_WORKER_THREADS"  # numba threads of each worker of a local CPU cluster


def limit_threads() -> None:
    """On a worker: use at most $GPUTEXT_WORKER_THREADS numba threads in this thread (the task's)."""
    value = os.environ.get(THREADS_VARIABLE)
    if value:
        import numba
        numba.set_num_threads(max(1, min(int(value), numba.config.NUMBA_NUM_THREADS)))


def require_dask():
    """Import distributed, or a one-line InputError naming the extra to install."""
    try:
        import distributed
    except ImportError:
        raise InputError("--scheduler / client= needs Dask: pip install 'gputext[dask]' "
                         "(dask and distributed; 'gputext[dask-cuda]' for one worker per GPU)") from None
    return distributed


def parse_local(spec: str) -> int | None:
    """'local:N' -> N (>= 1); None for anything else (an address)."""
    if not spec.startswith("local"):
        return None
    _, _, count = spec.partition(":")
    try:
        n = int(count) if count else (os.cpu_count() or 1)
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"--scheduler {spec!r}: expected local:N with N >= 1 workers, or a scheduler address")
    return n


def _gpu_count() -> int:
    try:
        from numba import cuda
        if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or not cuda.is_available():
            return 0
        return len(cuda.gpus)
    except Exception:
        return 0


def local_cluster(n_workers: int):
    """(cluster, kind): one worker per GPU when N <= the GPUs here (dask-cuda's LocalCUDACluster
    when installed, else worker processes each seeing one GPU through CUDA_VISIBLE_DEVICES), or a
    LocalCluster of N CPU worker processes."""
    distributed = require_dask()
    gpus = _gpu_count()
    threads = max(1, (os.cpu_count() or 1) // n_workers)
    if gpus and n_workers <= gpus:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            LocalCUDACluster = None
        devices = ",".join(str(i) for i in range(n_workers))
        if LocalCUDACluster is not None:
            return LocalCUDACluster(CUDA_VISIBLE_DEVICES=devices, threads_per_worker=1, dashboard_address=":0",
                                    env={THREADS_VARIABLE: str(threads)}), "dask-cuda LocalCUDACluster"
        # memory_limit: a share of the host's memory each; a Nanny's "auto" with one thread is one
        # core's share (8 GiB of a 64-core host: 10^8 documents' term maxima killed every worker, 2026-11-27)
        workers = {i: {"cls": distributed.Nanny,
                       "options": {"nthreads": 1, "memory_limit": 1.0 / n_workers,
                                   "env": {"CUDA_VISIBLE_DEVICES": str(i), THREADS_VARIABLE: str(threads)}}}
                   for i in range(n_workers)}
        scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": ":0"}}
        return (distributed.SpecCluster(workers=workers, scheduler=scheduler),
                f"{n_workers} GPU worker processes (CUDA_VISIBLE_DEVICES one each; dask-cuda not installed)")
    # not NUMBA_NUM_THREADS: a nanny sets "pre-spawn" variables in this very process, where numba
    # then refuses to run; the tasks call limit_threads() instead
    cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", env={THREADS_VARIABLE: str(threads)})
    return cluster, f"LocalCluster ({n_workers} processes, {threads} numba threads each)"


def check_scheduler(address: str, timeout: float = None) -> None:
    """Open one connection to a scheduler address and complete Dask's handshake within ``timeout``
    seconds in total (default CONNECT_TIMEOUT_S), else a one-line InputError.

    distributed's own connect timeout covers the TCP connection, not the handshake that follows
    (distributed.comm.core.connect awaits the server's first message without a limit): a server
    that accepts and never speaks would hang ``Client(address)`` for ever. The probe runs in a
    thread of its own with its own event loop, so it works under a running loop (a notebook) too."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect as comm_connect
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout

    async def probe():  # TCP connection (with distributed's retries) in 2/3 of the time, then the handshake
        comm = await asyncio.wait_for(comm_connect(address, timeout=timeout * 2 / 3), timeout)
        await comm.close()

    try:
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, probe()).result()
    except TimeoutError:  # asyncio's too (3.11+); before OSError, of which it is a subclass
        raise InputError(f"the server at {address} accepted the connection but did not complete Dask's handshake "
                         f"within {timeout:g} s: is it a Dask scheduler (dask scheduler)?") from None
    except OSError as exc:
        raise InputError(f"cannot reach the Dask scheduler at {address}: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # a bad address, a server speaking something else (undecodable frames, absurd sizes)
        raise InputError(f"cannot talk to a Dask scheduler at {address} "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None


@contextmanager
def connect(scheduler, quiet: bool = True):
    """A Client for ``scheduler`` (``local:N``, an address, or a Client used as given); says
    where the dashboard is (unless quiet) and closes what it started."""
    if scheduler is None:
        raise InputError("connect needs a scheduler: local:N or a scheduler address")
    distributed = require_dask()
    if isinstance(scheduler, distributed.Client):
        yield scheduler
        return
    spec = str(scheduler).strip()
    n_local = parse_local(spec)
    cluster = None
    try:
        if n_local is not None:
            cluster, kind = local_cluster(n_local)
            client = distributed.Client(cluster)
        else:
            kind = f"scheduler {spec}"
            check_scheduler(spec)  # bounded: the handshake too
            client = distributed.Client(spec, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        if cluster is not None:
            cluster.close()
        raise InputError(f"cannot reach the Dask scheduler at {spec}: {' '.join(str(exc).split())}") from None
    try:
        n = len(client.scheduler_info().get("workers", {}))
        info(f"dask: {kind}, {n} worker(s); dashboard {client.dashboard_link}", quiet)
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _worker_devices():
    """On a worker: (numba threads, CUDA devices visible, first device's name or '')."""
    import numba
    limit_threads()
    try:
        from numba import cuda
        if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and cuda.is_available():
            name = cuda.gpus[0].name
            return numba.get_num_threads(), len(cuda.gpus), name.decode() if isinstance(name, bytes) else name
    except Exception:
        pass
    return numba.get_num_threads(), 0, ""


def describe_cluster(client) -> list[str]:
    """One line per worker: address, memory limit, numba threads and CUDA devices."""
    workers = client.scheduler_info().get("workers", {})
    devices = client.run(_worker_devices) if workers else {}
    lines = []
    for address in sorted(workers):
        w = workers[address]
        threads, gpus, name = devices.get(address, (0, 0, ""))
        gpu = f"{gpus} GPU(s) ({name})" if gpus else "no GPU (CPU twin)"
        lines.append(f"{address}  memory limit {w.get('memory_limit', 0) / 2**30:.1f} GiB, "
                     f"{threads} numba threads, {gpu}")
    return lines


def versions() -> dict:
    """Installed versions of dask, distributed and dask-cuda ('not installed' when absent)."""
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for name in ("dask", "distributed", "dask-cuda"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out
