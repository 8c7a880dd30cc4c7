"""The dense search's certificate: proof on the host, from the float32 rounding-error bound, that
no document outside a query's rescored candidates can enter its top k (gputext.knn.dense).

``certified`` is the NumPy form (the reference that gputext.kernels.dense_knn.certify_unpack_cpu,
the compiled form used per round, is tested against); ``zero_rule`` settles non-negative data
whose left-out documents all have key 0. ``DocStats`` / ``doc_stats`` and ``BoundInputs`` are
what the bound needs about the documents and about one batch of queries.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_U32 = 2.0 ** -24  # unit roundoff of float32


@dataclass
class DocStats:
    """What the certificate needs about the documents: canonical |d|^2 (float64), 1/|d| and
    |d|^2/2 (float32, the float32 keys' finish), the largest norm, |d|^2 and l1 norm, whether
    every entry is >= 0 and the smallest positive entry."""

    dd: np.ndarray  # float64 canonical |d|^2
    rd: np.ndarray  # float32 1/|d| (0 for an all-zero row)
    half_sqd: np.ndarray  # float32 |d|^2 / 2
    max_norm: float
    max_sq: float
    max_l1: float
    nonneg: bool
    min_pos: float


def doc_stats(D: np.ndarray) -> DocStats:
    from ..kernels import dense_knn as kd

    dd = np.empty(D.shape[0], np.float64)
    kd.canonical_sumsq_cpu(D, dd)
    l1 = np.empty(D.shape[0], np.float64)
    kd.row_abs_sums_cpu(D, l1)
    with np.errstate(divide="ignore"):
        rd = np.where(dd > 0, 1.0 / np.sqrt(dd), 0.0).astype(np.float32)
    pos = D[D > 0]
    return DocStats(dd, rd, (dd / 2).astype(np.float32), float(np.sqrt(dd.max(initial=0.0))),
                     float(dd.max(initial=0.0)), float(l1.max(initial=0.0)),
                     bool(D.size == 0 or D.min() >= 0), float(pos.min()) if pos.size else 1.0)


@dataclass
class BoundInputs:
    """What the certificate needs about one batch: the float32 error bound per query."""

    code: int
    chain: int
    Qb: np.ndarray
    qq: np.ndarray
    docs: DocStats
    n_terms: int
    gamma: float = field(init=False)
    tiny: float = field(init=False)
    nonneg: np.ndarray = field(init=False)
    nq: np.ndarray = field(init=False)

    def __post_init__(self):
        self.gamma = (self.chain + 8) * _U32 * 1.01
        self.tiny = self.n_terms * 2.0 ** -140
        self.nq = np.sqrt(self.qq)
        if self.Qb.shape[0]:
            q_min = self.Qb.min(axis=1)
            q_minpos = np.where(self.Qb > 0, self.Qb, np.inf).min(axis=1)
        else:
            q_min = q_minpos = np.zeros(0)
        safe = np.minimum(q_minpos, np.float64(np.inf)) * self.docs.min_pos >= 2.0 ** -100
        self.nonneg = (q_min >= 0) & self.docs.nonneg & (safe | ~np.isfinite(q_minpos))


def certified(code, b: BoundInputs, rows, idx, score, all_complete, thr_ord, k, cand_idx_fn, n_docs, self_doc):
    """True per row when no document outside the rescored candidates can enter the top k.

    all_complete: no document was left out. Else every left-out document has float32 key <= thr
    (thr_ord: its ordered form, the largest key a left-out document can have, from the device). The
    float32 key differs from the exact value by at most gamma = (chain + 8) u (relative to the
    score for non-negative data, else to |q| |d|), giving a bound U on any left-out document's exact
    score; the row is certified when its k-th float64 score is strictly better than U. For
    non-negative data with thr = 0, every left-out document scores exactly 0, so the row is
    certified when the k-th result scores above 0 or every left-out document has a higher index
    than the k-th result (checked on the final candidate list, copied only then).
    """
    from ..kernels.dense_knn import ordered_to_float32

    n = rows.size
    ok = np.asarray(all_complete, bool).copy()
    if ok.all():
        return ok
    thr = np.where(ok, -np.inf, ordered_to_float32(thr_ord).astype(np.float64))
    s_k = score[:, k - 1]  # float64 from the finish kernel (NaN when fewer than k candidates)
    q = rows
    gamma = b.gamma
    nonneg = b.nonneg[q]
    tiny = b.n_terms * 2.0 ** -140
    with np.errstate(invalid="ignore"):
        if code in (0, 1):
            scale = np.ones(n) if code == 0 else b.nq[q] * b.docs.max_norm
            U = np.where(nonneg & (thr > 0), thr / (1 - gamma), thr + gamma * scale) + tiny
            U = U + np.abs(U) * 1e-12
            ok |= s_k > U
            zero = (~ok) & nonneg & (thr == 0)
            if zero.any():
                zr = np.nonzero(zero)[0]
                ok[zr] = zero_rule(q, zr, idx[:, k - 1], s_k, cand_idx_fn(), n_docs, self_doc)
        elif code == 2:
            E = gamma * (b.nq[q] * b.docs.max_norm + 0.5 * b.docs.max_sq) + tiny
            slack = 1e-12 * (b.qq[q] + b.docs.max_sq + 2 * b.nq[q] * b.docs.max_norm)
            L = np.sqrt(np.maximum(0.0, b.qq[q] - 2 * (thr + E) - slack))
            ok |= s_k < L
        else:
            L = (-thr) / (1 + gamma)
            L = L - np.abs(L) * 1e-12 - tiny
            ok |= s_k < L
    return ok


def zero_rule(rows, which, idx_k, s_k, cand, n_docs, self_doc) -> np.ndarray:
    """Certificate for non-negative data when every left-out document has key 0 (so exact score
    0): result row r (of ``which``) is proved when its k-th score s_k[r] is above 0, or when every
    left-out document has a higher index than its k-th result idx_k[r] (ties at 0 go to the lower
    index). cand (n_rows, >= k') int32: the rescored candidates (-1 padding); rows[r] is the batch
    row of result row r, self_doc its left-out document."""
    out = np.zeros(len(which), bool)
    for i, r in enumerate(which):
        if s_k[r] > 0:
            out[i] = True
            continue
        listed = np.zeros(n_docs + 1, bool)
        c = cand[r]
        listed[c[c >= 0]] = True
        if self_doc[rows[r]] >= 0:
            listed[self_doc[rows[r]]] = True
        first_out = int(np.argmin(listed))  # n_docs when every document is listed
        out[i] = idx_k[r] < first_out
    return out
