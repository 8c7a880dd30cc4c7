"""Clustering: overlapping star clustering (star.py) and stream clustering (stream.py)."""
