"""Submitting shard tasks and collecting their results in a fixed order, with the one-line
errors of a cluster that lost its workers or a shard that cannot be read."""
from __future__ import annotations

import time

from ..errors import GputextError, InputError

NO_WORKER_GRACE_S = 20.0  # how long the cluster may have no worker before the run stops
POLL_S = 1.0


def worker_addresses(client) -> list[str]:
    """The cluster's worker addresses, sorted; waits up to NO_WORKER_GRACE_S for a first one."""
    workers = sorted(client.scheduler_info().get("workers", {}))
    if not workers:
        try:
            client.wait_for_workers(1, timeout=NO_WORKER_GRACE_S)
        except TimeoutError:
            raise InputError(f"the Dask cluster has no worker (waited {NO_WORKER_GRACE_S:.0f} s): start workers "
                             "(dask worker ADDRESS) or use --scheduler local:N") from None
        workers = sorted(client.scheduler_info()["workers"])
    return workers


def submit(client, fn, shard, *args):
    """fn(*args) on the shard's worker (any other when that one is gone: the shard is rebuilt).
    The arguments (a batch of queries) travel inside the task on purpose: Dask's warning about
    large graphs is silenced (see DistributedIndex._run)."""
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*large graph.*")
        return client.submit(fn, *args, workers=[shard.worker], allow_other_workers=True, pure=False)


def _failure(exc: BaseException, what: str) -> GputextError:
    from distributed.scheduler import KilledWorker
    if isinstance(exc, GputextError):
        return exc
    if isinstance(exc, KilledWorker):
        return InputError(f"{what}: Dask workers died running it again and again ({' '.join(str(exc).split())}); "
                          "see the workers' logs (out of memory?)")
    return InputError(f"{what} failed on a Dask worker: {type(exc).__name__}: {' '.join(str(exc).split())}")


def gather(client, futures: list, what: str, on_done=None) -> list:
    """Results of ``futures`` in their order. on_done(i, result) is called as each one finishes
    (any order: progress). A task that raises -> that error (GputextError) or a one-line
    InputError; no worker for NO_WORKER_GRACE_S -> InputError."""
    from distributed import wait

    results = [None] * len(futures)
    where = {f.key: i for i, f in enumerate(futures)}
    pending = set(futures)
    alone_since = None
    try:
        while pending:
            try:
                done, pending = wait(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            for f in done:
                i = where[f.key]
                try:
                    results[i] = f.result()
                except Exception as exc:  # the task's error, or a lost / cancelled future
                    raise _failure(exc, what) from None
                if on_done is not None:
                    on_done(i, results[i])
            if done:
                alone_since = None
            elif not client.nthreads():
                alone_since = alone_since or time.monotonic()
                if time.monotonic() - alone_since > NO_WORKER_GRACE_S:
                    raise InputError(f"{what}: no Dask worker is left in the cluster (waited "
                                     f"{NO_WORKER_GRACE_S:.0f} s); start workers or use --scheduler local:N")
    finally:
        for f in pending:
            f.cancel()
    return results
