"""Independent references for star clustering, written from the paper's section 2 with Python
sets, exact fractions and math.fsum (no numba, no shared code with gputext.cluster), plus a
brute-force float64 graph builder.  The tests in this file check the references themselves on
the paper's hand-worked examples; test_star.py and test_star_dclus.py compare gputext to them.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

# The paper's Table 1 (v1..v9) as vertices 0..8, upper triangle (its printed matrix is not
# symmetric: rows v4 and v7 omit v2; the graph uses each pair once, from the lower vertex).
TABLE1 = [(1, 3, .4), (1, 5, .5), (2, 4, .4), (2, 7, .5), (3, 4, .7), (3, 5, .6), (3, 6, .3), (8, 9, .5)]
# Table 2: similarities among the added v10..v15; besides them only S(v2, v10) = 0.5.
TABLE2 = [(10, 11, .4), (10, 12, .3), (10, 13, .6), (11, 13, .4), (12, 13, .4), (14, 15, .5)]
TABLE2_OLD = [(2, 10, .5)]


def paper_edges(table):
    """(rows, cols, weights float32) with 0-based vertices."""
    return (np.array([a - 1 for a, _, _ in table]), np.array([b - 1 for _, b, _ in table]),
            np.array([w for _, _, w in table], np.float32))


# ----------------------------------------------------------------------------- graphs

def adjacency(n, rows, cols, weights, beta=None):
    """{v: {u: float(weight)}} of an undirected graph (weights as given, e.g. float32 values)."""
    adj = {v: {} for v in range(n)}
    for a, b, w in zip(rows, cols, weights):
        a, b = int(a), int(b)
        if beta is not None and w < beta:
            continue
        adj[a][b] = float(w)
        adj[b][a] = float(w)
    return adj


def adjacency_of(graph):
    """{v: {u: weight}} from a gputext StarGraph (to feed the references the very same weights)."""
    adj = {}
    for v in range(graph.n):
        s, e = graph.indptr[v], graph.indptr[v + 1]
        adj[v] = {int(u): float(w) for u, w in zip(graph.indices[s:e], graph.weights[s:e])}
    return adj


def brute_force_graph(X, beta):
    """Dense float64 cosine of the rows of X: {(i, j): cos} for i < j with cos >= beta."""
    D = np.asarray(sp.csr_matrix(X).toarray(), np.float64)
    norms = np.sqrt((D * D).sum(axis=1))
    S = D @ D.T
    with np.errstate(invalid="ignore", divide="ignore"):
        S = np.where(np.outer(norms, norms) > 0, S / np.outer(norms, norms), 0.0)
    out = {}
    n = D.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            if S[i, j] >= beta:
                out[(i, j)] = S[i, j]
    return out


def random_corpus(n_docs, n_terms, terms_per_doc, seed, empty=(), duplicates=()):
    """Small nonnegative CSR (n_docs, n_terms) float32 with a few shared terms (dense-ish graph)."""
    rng = np.random.default_rng(seed)
    rows, cols, vals = [], [], []
    for i in range(n_docs):
        if i in empty:
            continue
        k = int(rng.integers(1, terms_per_doc + 1))
        terms = rng.choice(n_terms, size=min(k, n_terms), replace=False)
        rows += [i] * len(terms)
        cols += terms.tolist()
        vals += rng.integers(1, 4, len(terms)).astype(float).tolist()
    X = sp.csr_matrix((np.array(vals, np.float32), (rows, cols)), shape=(n_docs, n_terms)).tolil()
    for src, dst in duplicates:
        X[dst] = X[src]
    X = sp.csr_matrix(X, dtype=np.float32)
    X.sort_indices()
    return X


# ----------------------------------------------------------------------------- OClustR

def relevance(adj):
    """Exact relevance (Fraction) of every vertex; AIS by math.fsum (correctly rounded sum)."""
    deg = {v: len(nb) for v, nb in adj.items()}
    ais = {v: (math.fsum(nb.values()) / deg[v] if deg[v] else 0.0) for v, nb in adj.items()}
    rel = {}
    for v, nb in adj.items():
        if not deg[v]:
            rel[v] = Fraction(0)
            continue
        dens = sum(1 for u in nb if deg[v] >= deg[u])
        comp = sum(1 for u in nb if ais[v] >= ais[u])
        rel[v] = Fraction(dens + comp, 2 * deg[v])
    return rel


def covered_by(adj, centers):
    out = set()
    for c in centers:
        out.add(c)
        out |= set(adj[c])
    return out


def improve(adj, centers):
    """OClustR's third stage, recomputing memberships from scratch at every step.

    Returns {center: frozenset(cluster)}.  Same documented decisions as gputext: visit centers by
    (degree desc, id asc); examine u in Adj(v) by ascending id; an already visited center is final.
    """
    C = set(centers)
    linked = {c: set() for c in C}
    order = sorted(C, key=lambda v: (-len(adj[v]), v))

    def members(c):
        return {c} | set(adj[c]) | linked[c]

    def holders():  # vertex -> number of current ws-graphs containing it, recomputed from scratch
        out = {}
        for c in C:
            for w in members(c):
                out[w] = out.get(w, 0) + 1
        return out

    count = holders()
    visited = set()
    for v in order:
        if v not in C:
            continue
        for u in sorted(adj[v]):
            if u not in C or u in visited:
                continue
            m = members(u)
            shared = sum(1 for w in m if count[w] > 1)
            if shared > len(m) - shared:
                only = {w for w in m if count[w] == 1}
                C.remove(u)
                linked[v] |= only
                count = holders()
        visited.add(v)
    return {c: frozenset(members(c)) for c in C}


def oclustr(adj):
    """OClustR from scratch: {center: frozenset(members)}."""
    rel = relevance(adj)
    C = {v for v in adj if not adj[v]}
    covered = set(C)
    for v in sorted((v for v in adj if rel[v] > 0), key=lambda v: (-rel[v], v)):
        if v not in covered or any(u not in covered for u in adj[v]):
            C.add(v)
            covered |= {v} | set(adj[v])
    assert covered == set(adj)
    return improve(adj, C)


# ----------------------------------------------------------------------------- DClustR

def components(adj, seeds):
    """Vertices of the connected components containing any seed (depth-first search)."""
    seen = set()
    for s in seeds:
        if s in seen:
            continue
        stack = [s]
        seen.add(s)
        while stack:
            v = stack.pop()
            for u in adj[v]:
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
    return seen


def dclustr(adj, old_clusters, added):
    """DClustR after additions (paper section 2.2) on the whole graph in memory.

    adj: the graph after the additions; old_clusters: {center: members} before; added: the new
    vertices.  Returns ({center: frozenset(members)}, affected vertex set).
    """
    affected = components(adj, added)
    sub = {v: adj[v] for v in affected}
    rel = relevance(sub)
    C_old = {c for c in old_clusters if c in affected}

    def coverers(u):
        return [c for c in C_old if c == u or u in adj[c]]

    L, active = set(), set()
    for v in sorted(affected - C_old):
        if rel[v] <= 0:
            continue
        a = not coverers(v)
        b = any(not coverers(u) for u in adj[v])
        weak_cover = [u for u in adj[v] if not any(rel[c] >= rel[v] for c in coverers(u))]
        active |= set(weak_cover)
        if a or b or weak_cover:
            L.add(v)
    C = set(C_old)
    for v in sorted(C_old):
        weak = [u for u in adj[v] if rel[u] > rel[v]]
        L |= set(weak)
        if weak or any(u in active for u in adj[v]):
            C.discard(v)
            if rel[v] > 0:
                L.add(v)
    C |= {v for v in affected if not adj[v]}
    covered = covered_by(adj, C)

    def visit(candidates):
        nonlocal covered
        for v in sorted(candidates, key=lambda v: (-rel[v], v)):
            if v in C:
                continue
            if v not in covered or any(u not in covered for u in adj[v]):
                C.add(v)
                covered |= {v} | set(adj[v])

    visit(L)
    assert covered == affected
    new = improve(sub, C)
    kept = {c: m for c, m in old_clusters.items() if c not in affected}
    return {**kept, **new}, affected


def named(clusters, offset=1):
    """{center: sorted members} with 1-based names, for readable assertions."""
    return {c + offset: sorted(v + offset for v in m) for c, m in clusters.items()}


# ----------------------------------------------------------------------------- the references on the paper's examples

def test_reference_relevance_of_table1():
    adj = adjacency(9, *paper_edges(TABLE1), beta=0.3)
    rel = relevance(adj)
    # worked by hand in docs/star.md: v1 .25, v2 .5, v3 .75, v4 .75, v5 .75, v6 0, v7 .5, v8 1, v9 1
    assert [rel[v] for v in range(9)] == [Fraction(1, 4), Fraction(1, 2), Fraction(3, 4), Fraction(3, 4),
                                          Fraction(3, 4), 0, Fraction(1, 2), 1, 1]


def test_reference_oclustr_of_table1():
    adj = adjacency(9, *paper_edges(TABLE1), beta=0.3)
    assert named(oclustr(adj)) == {3: [1, 3, 4, 5, 6], 2: [2, 4, 7], 8: [8, 9]}


def test_reference_dclustr_of_table2():
    adj1 = adjacency(9, *paper_edges(TABLE1), beta=0.3)
    before = oclustr(adj1)
    rows, cols, w = paper_edges(TABLE1 + TABLE2 + TABLE2_OLD)
    adj2 = adjacency(15, rows, cols, w, beta=0.3)
    after, affected = dclustr(adj2, before, set(range(9, 15)))
    assert sorted(v + 1 for v in affected) == [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15]
    assert named(after) == {3: [1, 3, 4, 5, 6], 8: [8, 9], 10: [2, 7, 10, 11, 12, 13], 14: [14, 15]}
    # here the update coincides with OClustR on the union
    assert named(oclustr(adj2)) == named(after)
