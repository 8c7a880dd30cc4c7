"""A categorical column (a document's label, a cluster's name): int32 codes into a list of names.
The corpus file stores it as anndata does (codes + categories); gputext.io.anndata maps it to and
from a pandas categorical."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Categorical:
    """A categorical column: int32 codes (-1 = missing) into ``categories`` (str)."""

    codes: np.ndarray
    categories: np.ndarray

    def __len__(self) -> int:
        return len(self.codes)

    def take(self, rows: np.ndarray) -> "Categorical":
        return Categorical(self.codes[rows], self.categories)

    def values(self) -> np.ndarray:
        out = np.empty(len(self.codes), dtype=object)
        ok = self.codes >= 0
        out[ok] = self.categories[self.codes[ok]]
        out[~ok] = None
        return out
