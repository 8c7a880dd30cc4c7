"""Learning to rank with gputext.RankSVM on svmlight data with query ids (qid:), as LETOR and
MSLR-WEB ship it: train on some queries, report NDCG@10 on the others.

    python examples/ranksvm_svmlight.py                      # writes and uses a small synthetic file
    python examples/ranksvm_svmlight.py --svmlight Fold1/train.txt

The synthetic file: queries of 10-30 documents with 20 features; relevance 0-3 from a hidden
linear score plus noise.
"""
import argparse
import os
import tempfile

import numpy as np
from sklearn.datasets import dump_svmlight_file, load_svmlight_file

from gputext import RankSVM


def synthetic_file(path: str, n_queries: int = 60, n_features: int = 20, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=n_features)
    sizes = rng.integers(10, 31, n_queries)
    X = rng.normal(size=(sizes.sum(), n_features))
    score = X @ w + rng.normal(scale=1.0, size=len(X))
    relevance = np.digitize(score, np.quantile(score, [0.5, 0.8, 0.95]))
    dump_svmlight_file(X, relevance, path, query_id=np.repeat(np.arange(n_queries), sizes), zero_based=False)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--svmlight", help="an svmlight file with qid:")
    p.add_argument("-C", type=float, default=1.0)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a = p.parse_args()
    path = a.svmlight
    if path is None:
        path = os.path.join(tempfile.mkdtemp(), "ltr.svm")
        synthetic_file(path)
    X, relevance, qid = load_svmlight_file(path, query_id=True)

    queries = np.unique(qid)
    test_queries = np.random.default_rng(0).choice(queries, max(1, len(queries) // 4), replace=False)
    test = np.isin(qid, test_queries)
    model = RankSVM(C=a.C, device=a.device).fit(X[~test], relevance[~test], qid=qid[~test])
    print(f"trained on {int((~test).sum())} documents of {len(queries) - len(test_queries)} queries "
          f"in {model.n_iter_} Newton steps ({model.device_})")
    print(f"NDCG@10 on {len(test_queries)} held-out queries: {model.score(X[test], relevance[test], qid=qid[test]):.3f}")
    top = np.argsort(-model.predict(X[test][qid[test] == test_queries[0]]))[:5]
    print(f"query {test_queries[0]}: top 5 documents {top.tolist()}")


if __name__ == "__main__":
    main()
