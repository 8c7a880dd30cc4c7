"""Meta-features of the kNN classifier: every query's cosine similarity and L2 distance to each
group's centroid (leave-one-out for a query's own group), host side for both backends."""
from __future__ import annotations

import math

import numpy as np
from numba import prange
from .jit import cpu_jit


@cpu_jit(parallel=True)
def group_sums_cpu(indptr, indices, data, group_ptr, n_terms):
    """Sums of the rows of each group (rows [group_ptr[g], group_ptr[g+1]) of a CSR matrix),
    float64, added in row order: S (n_terms, n_groups) and ss (n_groups,) = |S_g|^2. Groups in
    parallel, each into its own row of a (n_groups, n_terms) scratch, transposed at the end."""
    n_groups = group_ptr.shape[0] - 1
    rows = np.zeros((n_groups, n_terms), np.float64)
    ss = np.zeros(n_groups, np.float64)
    for g in prange(n_groups):
        sums = rows[g]
        for r in range(group_ptr[g], group_ptr[g + 1]):
            for p in range(indptr[r], indptr[r + 1]):
                sums[indices[p]] += np.float64(data[p])
        total = 0.0
        for t in range(n_terms):
            total += sums[t] * sums[t]
        ss[g] = total
    return np.ascontiguousarray(rows.T), ss


@cpu_jit(parallel=True)
def centroid_features_cpu(q_indptr, q_indices, q_data, S, ss, counts, own_group, out, col_cos, col_l2):
    """Cosine similarity and L2 distance of every query to every group's centroid, in float64,
    rounded into out[i, g, col_cos] and out[i, g, col_l2] (out float32 (Q, n_groups, width)).

    S float64 (n_terms, n_groups) group sums, ss (n_groups,) their squared norms, counts int64
    (n_groups,) group sizes; own_group int64 (Q,): the group query i belongs to (it is then left
    out of that group's centroid: the centroid of the other counts[g] - 1 rows), or -1. x.S_g is
    summed over the query's terms in order; a centroid that does not exist (no row left) is the
    zero vector: cosine 0, L2 |x|_2. Queries in parallel."""
    n_q = q_indptr.shape[0] - 1
    n_groups = S.shape[1]
    for i in prange(n_q):
        xs = np.zeros(n_groups, np.float64)
        sq = 0.0
        for p in range(q_indptr[i], q_indptr[i + 1]):
            w = np.float64(q_data[p])
            sq += w * w
            t = q_indices[p]
            for g in range(n_groups):
                xs[g] += w * S[t, g]
        for g in range(n_groups):
            loo = own_group[i] == g
            n_eff = counts[g] - 1 if loo else counts[g]
            safe = np.float64(max(n_eff, 1))
            if loo:
                dot = (xs[g] - sq) / safe
                cen_sq = (ss[g] - 2.0 * xs[g] + sq) / (safe * safe)
            else:
                dot = xs[g] / safe
                cen_sq = ss[g] / (safe * safe)
            if cen_sq < 0.0:
                cen_sq = 0.0
            if n_eff > 0:
                den = math.sqrt(sq) * math.sqrt(cen_sq)
                cos = dot / den if den > 0.0 else 0.0
                l2 = math.sqrt(max(sq - 2.0 * dot + cen_sq, 0.0))
            else:
                cos = 0.0
                l2 = math.sqrt(sq)
            out[i, g, col_cos] = np.float32(cos)
            out[i, g, col_l2] = np.float32(l2)


@cpu_jit(parallel=True)
def set_columns_cpu(out, values, col):
    """out[i, g, col:col + values.shape[2]] = values[i, g, :] for every (i, g), rows in parallel
    (out float32 (Q, G, width), values float32 (Q, G, n)): the meta-features' centroid columns."""
    n = values.shape[2]
    for i in prange(out.shape[0]):
        for g in range(out.shape[1]):
            for j in range(n):
                out[i, g, col + j] = values[i, g, j]
