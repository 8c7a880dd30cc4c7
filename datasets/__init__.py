"""Deterministic synthetic corpora and learning-to-rank data, installed as ``gputext.datasets``."""
