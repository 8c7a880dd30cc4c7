"""Host-side numba code of the clustering metrics (gputext.cluster.metrics): FBcubed's grouping
of identical membership rows and its pair counts, overlapping NMI's conditional entropies.

Sequential compiled loops over CSR memberships (ptr int64 (n+1,), idx int64, sorted rows).
"""
from __future__ import annotations

import math

import numpy as np
from ..kernels.jit import cpu_jit


@cpu_jit
def _row_cmp(ptr, idx, a, b):
    la, lb = ptr[a + 1] - ptr[a], ptr[b + 1] - ptr[b]
    for t in range(min(la, lb)):
        x, y = idx[ptr[a] + t], idx[ptr[b] + t]
        if x != y:
            return -1 if x < y else 1
    if la != lb:
        return -1 if la < lb else 1
    return 0


@cpu_jit
def sort_rows(ptr, idx):
    """Item order grouping identical rows (merge sort with a lexicographic row comparison)."""
    n = ptr.shape[0] - 1
    order = np.arange(n)
    tmp = np.empty(n, np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if _row_cmp(ptr, idx, order[j], order[i]) < 0:
                    tmp[k] = order[j]
                    j += 1
                else:
                    tmp[k] = order[i]
                    i += 1
                k += 1
            while i < mid:
                tmp[k] = order[i]
                i += 1
                k += 1
            while j < hi:
                tmp[k] = order[j]
                j += 1
                k += 1
        order, tmp = tmp, order
        width *= 2
    return order


@cpu_jit
def _intersect(idx_a, a0, a1, idx_b, b0, b1):
    c = 0
    while a0 < a1 and b0 < b1:
        if idx_a[a0] == idx_b[b0]:
            c += 1
            a0 += 1
            b0 += 1
        elif idx_a[a0] < idx_b[b0]:
            a0 += 1
        else:
            b0 += 1
    return c


@cpu_jit
def bcubed_groups(weight, c_ptr, c_idx, l_ptr, l_idx, cg_ptr, cg_idx, lg_ptr, lg_idx):
    """Per group g: precision and recall of its items (see module docstring).

    weight int64 (G,); c_ptr/c_idx: clusters of each group (sorted); l_ptr/l_idx: categories;
    cg_ptr/cg_idx: groups of each cluster; lg_ptr/lg_idx: groups of each category.
    """
    G = weight.shape[0]
    prec = np.zeros(G)
    rec = np.zeros(G)
    shared = np.zeros(G, np.int64)
    touched = np.empty(G, np.int64)
    seen = np.zeros(G, np.bool_)
    for g in range(G):
        n_t = 0
        for p in range(c_ptr[g], c_ptr[g + 1]):
            c = c_idx[p]
            for q in range(cg_ptr[c], cg_ptr[c + 1]):
                h = cg_idx[q]
                if shared[h] == 0:
                    touched[n_t] = h
                    n_t += 1
                shared[h] += 1
        p_num = 0.0
        p_den = 0.0
        r_num = 0.0
        for t in range(n_t):
            h = touched[t]
            a = shared[h]
            b = _intersect(l_idx, l_ptr[g], l_ptr[g + 1], l_idx, l_ptr[h], l_ptr[h + 1])
            m = min(a, b)
            p_num += weight[h] * (m / a)
            p_den += weight[h]
            if b > 0:
                r_num += weight[h] * (m / b)
            shared[h] = 0
        # recall denominator: items sharing at least one category with g
        r_den = 0.0
        n_s = 0
        for p in range(l_ptr[g], l_ptr[g + 1]):
            lab = l_idx[p]
            for q in range(lg_ptr[lab], lg_ptr[lab + 1]):
                h = lg_idx[q]
                if not seen[h]:
                    seen[h] = True
                    touched[n_s] = h
                    n_s += 1
                    r_den += weight[h]
        for t in range(n_s):
            seen[touched[t]] = False
        prec[g] = p_num / p_den
        rec[g] = r_num / r_den
    return prec, rec


@cpu_jit
def same_rows(ptr, idx, a, b, out):
    for i in range(a.shape[0]):
        out[i] = _row_cmp(ptr, idx, a[i], b[i]) == 0


@cpu_jit
def _h(p):
    if p <= 0.0:
        return 0.0
    return -p * math.log2(p)


@cpu_jit
def _cond(a, b, c, n):
    """(accepted, H(X_k | Y_l)) for |X_k| = a, |Y_l| = b, |X_k & Y_l| = c over n items."""
    p11 = c / n
    p10 = (a - c) / n
    p01 = (b - c) / n
    p00 = (n - a - b + c) / n
    h11, h10, h01, h00 = _h(p11), _h(p10), _h(p01), _h(p00)
    accepted = h11 + h00 > h01 + h10
    hy = _h(b / n) + _h((n - b) / n)
    return accepted, h11 + h10 + h01 + h00 - hy


@cpu_jit
def conditional_entropies(n, size_x, size_y, ov_ptr, ov_idx, ov_val, y_sizes, y_size_count, y_size_class):
    """H(X_k | Y) for every k: the smallest accepted H(X_k | Y_l), else H(X_k).

    ov_*: CSR (K rows) of nonzero overlaps with the clusters of Y; y_sizes: the distinct sizes of
    Y's clusters, y_size_count: how many clusters have each, y_size_class: class of each Y cluster.
    """
    K = size_x.shape[0]
    out = np.empty(K)
    used = np.zeros(y_sizes.shape[0], np.int64)
    for k in range(K):
        a = size_x[k]
        hx = _h(a / n) + _h((n - a) / n)
        best = hx
        found = False
        for p in range(ov_ptr[k], ov_ptr[k + 1]):
            l = ov_idx[p]
            ok, hc = _cond(a, size_y[l], ov_val[p], n)
            used[y_size_class[l]] += 1
            if ok and (not found or hc < best):
                best = hc
                found = True
        for s in range(y_sizes.shape[0]):
            if used[s] < y_size_count[s]:  # some cluster of this size is disjoint from X_k
                ok, hc = _cond(a, y_sizes[s], 0, n)
                if ok and (not found or hc < best):
                    best = hc
                    found = True
        for p in range(ov_ptr[k], ov_ptr[k + 1]):
            used[y_size_class[ov_idx[p]]] = 0
        out[k] = best
    return out
