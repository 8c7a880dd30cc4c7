"""Overlapping star clustering of a synthetic corpus with gputext.StarClustering, then a plot:
the documents in 2-D (truncated SVD of their TF-IDF vectors) coloured by labels_ (each
document's one cluster), the cluster centers marked, and the sizes of the overlapping clusters.

    python examples/star_clustering_plot.py --out star.png
    python examples/star_clustering_plot.py --docs 20000 --beta 0.3 --out star.png

Then partial_fit adds more documents (DClustR's update) and the clusters of the union are reported.
Needs matplotlib: pip install 'gputext[plot]'.
"""
import argparse

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from sklearn.decomposition import TruncatedSVD  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from gputext import StarClustering  # noqa: E402
from gputext.datasets.synth import make_corpus  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=600)
    p.add_argument("--topics", type=int, default=6)
    p.add_argument("--beta", type=float, default=0.1, help="cosine threshold of the similarity graph (StarClustering's default)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--out", default="star_clusters.png")
    a = p.parse_args()
    corpus = make_corpus(a.docs, 3000, 30, a.topics, seed=1, topic_weight=0.8)
    more = make_corpus(a.docs // 5, 3000, 30, a.topics, seed=2, model_seed=1, topic_weight=0.8)

    star = StarClustering(beta=a.beta, device=a.device).fit(corpus.X)
    sizes = np.diff(star.membership_.tocsc().indptr)
    per_doc = np.diff(star.membership_.indptr)
    print(f"{a.docs} documents: {star.n_clusters_} clusters (sizes {sizes.min()}-{sizes.max()}), "
          f"{per_doc.mean():.2f} clusters a document; adjusted Rand index of labels_ against the topics: "
          f"{adjusted_rand_score(corpus.labels.codes, star.labels_):.3f}")

    xy = TruncatedSVD(2, random_state=0).fit_transform(corpus.X)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.scatter(xy[:, 0], xy[:, 1], c=star.labels_, cmap="tab20", s=8)
    left.scatter(xy[star.centers_, 0], xy[star.centers_, 1], c="black", marker="x", s=20, label="centers")
    left.set_title(f"documents by labels_ ({star.n_clusters_} star clusters, beta {a.beta})")
    left.legend(loc="best")
    right.hist(sizes, bins=30, color="#3b6ea8")
    right.set_xlabel("documents in a cluster (overlapping)")
    right.set_ylabel("clusters")
    fig.tight_layout()
    fig.savefig(a.out, dpi=100)
    print(f"wrote {a.out}")

    star.partial_fit(more.X)  # DClustR: the clusters of the union, without reclustering from scratch
    print(f"after adding {more.n_docs} documents: {star.n_clusters_} clusters of {star.labels_.shape[0]} documents")


if __name__ == "__main__":
    main()
