"""Near-duplicate detection: every pair of documents whose TF-IDF vectors have cosine similarity
>= 0.8 (cosine distance <= 0.2), from gputext.NearestNeighbors.radius_neighbors_graph, grouped
into connected components.

    python examples/near_duplicates.py                  # built-in corpus with planted near-duplicates
    python examples/near_duplicates.py --texts FILE     # one document a line

The built-in corpus: random 12-word sentences over 100 words, a few of them copied with one word changed.
"""
import argparse

import numpy as np
from scipy.sparse.csgraph import connected_components
from sklearn.feature_extraction.text import TfidfVectorizer

from gputext import NearestNeighbors

WORDS = [f"{a}{b}" for a in ("river", "bank", "city", "light", "music", "garden", "winter", "market", "paper", "forest")
         for b in ("", "s", "side", "man", "line", "way", "land", "work", "house", "time")]  # 100 words


def small_corpus(n_docs: int, n_copies: int, seed: int):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, 12)) for _ in range(n_docs)]
    for i in rng.choice(n_docs, n_copies, replace=False):
        words = texts[i].split()
        words[rng.integers(len(words))] = str(rng.choice(WORDS))  # one word changed
        texts.append(" ".join(words))
    return texts


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--texts", help="a text file, one document a line")
    p.add_argument("--max-distance", type=float, default=0.2, help="cosine distance (1 - similarity)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a = p.parse_args()
    texts = open(a.texts).read().splitlines() if a.texts else small_corpus(300, 12, seed=0)

    X = TfidfVectorizer().fit_transform(texts)
    nn = NearestNeighbors(metric="cosine", device=a.device).fit(X)
    G = nn.radius_neighbors_graph(radius=a.max_distance, mode="distance")  # X=None: each document left out of its own row
    n_groups, group = connected_components(G, directed=False)
    sizes = np.bincount(group)
    duplicates = [np.flatnonzero(group == g) for g in np.flatnonzero(sizes > 1)]
    print(f"{len(texts)} documents, {G.nnz // 2} near-duplicate pairs, {len(duplicates)} groups")
    for members in duplicates[:5]:
        i, j = members[:2]
        print(f"  documents {members.tolist()}: distance {G[i, j]:.3f}")


if __name__ == "__main__":
    main()
