"""What an engine search did, as a typed report (gputext.device.timer.RunReport).

The engine's drivers fill a ``SearchReport``; the ``stats=`` dict of search_topk,
search_threshold and search_topk_grouped receives its flat view (``report.into(stats)``), so the
keys the CLI and scripts read (backend, shards, batch_size, index_bytes, rows_bytes, postings,
stages, seconds, ...) keep their names.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..device.timer import RunReport


@dataclass
class SearchReport(RunReport):
    """backend / seconds: see RunReport. shards: index shards on the device; batch_size: queries
    scored at once (the top-k: a tile, per stream); index_bytes: the largest shard's device bytes;
    rows_bytes: score rows and per-segment lists on the device; postings: postings scored; launch:
    "raw" (pre-marshalled launches) or "dispatcher"; fallback: the line saying another method
    served the request; segments, geometry, merge_levels: the grouped selector's plan (and the
    blocked top-k's: geometry = (block, items, tile)); stages: milliseconds per stage (grouped); topk_method: "rows" or "blocked";
    postings_skipped: postings the blocked method's safe pruning left out (postings: those scored)."""

    shards: int | None = None
    batch_size: int | None = None
    index_bytes: int | None = None
    rows_bytes: int | None = None
    postings: int | None = None
    launch: str | None = None
    fallback: str | None = None
    segments: int | None = None
    geometry: tuple | None = None
    merge_levels: int | None = None
    stages: dict | None = None
    topk_method: str | None = None
    postings_skipped: int | None = None

    def as_stats(self) -> dict:
        out = super().as_stats()
        if not self.seconds:
            out.pop("seconds", None)  # only drivers that time themselves report seconds
        return out
