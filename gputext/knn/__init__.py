"""kNN over sparse corpora: exact search through the scoring engine, dense search, classification
and meta-features."""
