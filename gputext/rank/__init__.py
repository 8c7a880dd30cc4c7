"""Linear RankSVM (L2 loss, TRON) with per-query pair statistics."""
