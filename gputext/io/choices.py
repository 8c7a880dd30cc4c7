"""The names the corpus commands offer as choices: input formats and term weightings.

Plain constants, no numpy: `gputext corpus --help` (and `corpus build --help`) list them without
importing the readers. gputext.io.readers and gputext.io.weighting define what each name does and
re-export these tuples.
"""
FORMATS = ("auto", "tab", "tsv", "dir", "jsonl", "svmlight", "uci", "counts-csv", "npz")
WEIGHTINGS = ("tfidf", "tf", "binary", "tficf", "none")
