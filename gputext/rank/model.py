"""MODEL.h5: a trained linear RankSVM, written with h5py inside gputext.io.atomic_output.

Layout (not a corpus file; DESIGN.md names the weight vector's key):

    /                         attrs gputext-format="rank-model", gputext-format-version="1"
    /uns/gputext/version      gputext version that wrote it
    /uns/gputext/rank/w       float64 (n_features,)        the weights; score = X w
    /uns/gputext/rank/n_features  int64
    /uns/gputext/rank/C, eps  float64                      training parameters
    /uns/gputext/rank/max_iter, iterations, cg_iterations   int64
    /uns/gputext/rank/objective, grad_norm, grad_norm0      float64 (f(w), |grad f(w)|, |grad f(0)|)
    /uns/gputext/rank/converged   bool ; backend  str ; train_seconds float64
    /uns/gputext/rank/n_docs, n_queries, n_pairs   int64  (training set)
    /uns/gputext/rank/C_grid, C_grid_scores   float64 (only when C was chosen on a validation
                                              file); selected_by  str

The reader checks every key and names the offending one.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from .. import __version__
from ..errors import FormatError, InputError
from ..io.corpus import atomic_output
from ..io.h5file import h5_output

FORMAT = "rank-model"
FORMAT_VERSION = "1"
ROOT = "uns/gputext/rank"


@dataclass
class RankModel:
    w: np.ndarray
    C: float
    eps: float
    max_iter: int = 1000
    iterations: int = 0
    cg_iterations: int = 0
    objective: float = float("nan")
    grad_norm: float = float("nan")
    grad_norm0: float = float("nan")
    converged: bool = False
    backend: str = "cpu"
    train_seconds: float = 0.0
    n_docs: int = 0
    n_queries: int = 0
    n_pairs: int = 0
    C_grid: np.ndarray | None = None
    C_grid_scores: np.ndarray | None = None
    selected_by: str | None = None
    history: list = field(default_factory=list)

    @property
    def n_features(self) -> int:
        return int(self.w.shape[0])

    def save(self, path: str) -> None:
        with atomic_output(path) as tmp:
            with h5_output(tmp, "w") as f:
                f.attrs["gputext-format"] = FORMAT
                f.attrs["gputext-format-version"] = FORMAT_VERSION
                f.create_dataset("uns/gputext/version", data=__version__, dtype=h5py.string_dtype("utf-8"))
                g = f.create_group(ROOT)
                g.create_dataset("w", data=np.asarray(self.w, dtype=np.float64))
                for key in ("n_features", "max_iter", "iterations", "cg_iterations", "n_docs", "n_queries", "n_pairs"):
                    g.create_dataset(key, data=np.int64(getattr(self, key)))
                for key in ("C", "eps", "objective", "grad_norm", "grad_norm0", "train_seconds"):
                    g.create_dataset(key, data=np.float64(getattr(self, key)))
                g.create_dataset("converged", data=bool(self.converged))
                g.create_dataset("backend", data=self.backend, dtype=h5py.string_dtype("utf-8"))
                if self.C_grid is not None:
                    g.create_dataset("C_grid", data=np.asarray(self.C_grid, dtype=np.float64))
                    g.create_dataset("C_grid_scores", data=np.asarray(self.C_grid_scores, dtype=np.float64))
                    g.create_dataset("selected_by", data=self.selected_by or "", dtype=h5py.string_dtype("utf-8"))

    @classmethod
    def load(cls, path: str) -> "RankModel":
        if path != "-" and not os.path.exists(path):
            raise InputError(f"{path}: no such file")
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory, expected a gputext rank model (.h5)")
        try:
            f = h5py.File(path, "r")
        except OSError as exc:
            raise FormatError(f"{path}: not a readable HDF5 file (truncated, or another format): "
                              f"{str(exc).splitlines()[0]}") from None
        with f:
            fmt = f.attrs.get("gputext-format")
            if isinstance(fmt, bytes):
                fmt = fmt.decode()
            if fmt != FORMAT:
                what = "a gputext corpus, not a model" if fmt == "corpus" else f"gputext-format={fmt!r}"
                raise FormatError(f"{path}: is {what}; expected a rank model written by `gputext rank train` "
                                  f"(root attribute gputext-format='{FORMAT}')")

            def need(key, kind="scalar"):
                full = f"{ROOT}/{key}"
                if full not in f or not isinstance(f[full], h5py.Dataset):
                    raise FormatError(f"{path}: /{full} is missing")
                value = f[full][()]
                if kind == "scalar":
                    if np.ndim(value) != 0:
                        raise FormatError(f"{path}: /{full} should be a scalar, found shape {np.shape(value)}")
                    if isinstance(value, bytes):
                        return value.decode()
                    return value.item() if hasattr(value, "item") else value
                return value

            w = need("w", "array")
            if not isinstance(w, np.ndarray) or w.ndim != 1 or w.dtype.kind != "f":
                raise FormatError(f"{path}: /{ROOT}/w should be a 1-d float64 array, found "
                                  f"{getattr(w, 'dtype', type(w))} with shape {np.shape(w)}")
            if not np.all(np.isfinite(w)):
                raise FormatError(f"{path}: /{ROOT}/w contains NaN or infinite weights")
            n_features = need("n_features")
            if n_features != w.shape[0]:
                raise FormatError(f"{path}: /{ROOT}/n_features = {n_features} but /{ROOT}/w has {w.shape[0]} entries")
            C = float(need("C"))
            if not (C > 0):
                raise FormatError(f"{path}: /{ROOT}/C = {C}, expected a positive number")
            model = cls(w=w.astype(np.float64), C=C, eps=float(need("eps")), max_iter=int(need("max_iter")),
                        iterations=int(need("iterations")), cg_iterations=int(need("cg_iterations")),
                        objective=float(need("objective")), grad_norm=float(need("grad_norm")),
                        grad_norm0=float(need("grad_norm0")), converged=bool(need("converged")),
                        backend=str(need("backend")), train_seconds=float(need("train_seconds")),
                        n_docs=int(need("n_docs")), n_queries=int(need("n_queries")), n_pairs=int(need("n_pairs")))
            if f"{ROOT}/C_grid" in f:
                model.C_grid = need("C_grid", "array")
                model.C_grid_scores = need("C_grid_scores", "array")
                model.selected_by = str(need("selected_by"))
            return model
