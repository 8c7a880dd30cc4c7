"""The scoring engine and its families on a Dask cluster (``pip install 'gputext[dask]'``).

    from gputext.distributed import connect, DistributedIndex
    with connect("local:4") as client:                    # or "tcp://scheduler:8786", or a Client
        index = DistributedIndex.from_path("corpus.h5", client)   # each worker reads its rows
        indices, scores = index.search_topk(Q, k=30)      # identical to gputext.engine.search_topk

The corpus is cut into one document range per worker (balanced by postings); each worker builds
its range's index once and keeps it for the life of the client. Query batches go to every
shard, each shard selects, the client merges exactly. The families take ``client=``:
gputext.knn.search.search_files, gputext.knn.classify.knn_classify,
gputext.knn.metafeatures.compute_metafeatures, gputext.cluster.star.cluster_star and
gputext.rank.train. See docs/distributed.md. Nothing here imports Dask until it is used.
"""
from __future__ import annotations

__all__ = ["connect", "DistributedIndex", "describe_cluster"]


def __getattr__(name):
    if name in ("connect", "describe_cluster"):
        from . import client
        return getattr(client, name)
    if name == "DistributedIndex":
        from .search import DistributedIndex
        return DistributedIndex
    raise AttributeError(name)
