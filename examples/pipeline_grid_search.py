"""kNN text classification in a scikit-learn Pipeline: TfidfVectorizer -> gputext.KNeighborsClassifier,
with GridSearchCV choosing k and the vote's weights.

    python examples/pipeline_grid_search.py                                  # small built-in corpus
    python examples/pipeline_grid_search.py --data ../shared/datasets/20newsgroups   # 20 Newsgroups .tab files

The built-in corpus: three topics, each a small vocabulary, sentences drawn at random (seeded).
With --data, the folder's *-train.tab / *-test.tab (Orange format: label, text) are used.
"""
import argparse
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from gputext import KNeighborsClassifier

TOPICS = {"sport": "match goal team striker keeper league score referee penalty season",
          "politics": "vote senate bill budget minister parliament election tax party law",
          "science": "cell gene protein virus experiment molecule theory physics data lab"}
COMMON = "the a of new said today week people year report"


def small_corpus(n_per_topic: int, seed: int):
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for topic, words in TOPICS.items():
        for _ in range(n_per_topic):
            texts.append(" ".join(rng.choice(words.split(), 5).tolist() + rng.choice(COMMON.split(), 4).tolist()))
            labels.append(topic)
    return texts, labels


def read_tab(path: Path):
    """An Orange .tab file: three header lines, then label<TAB>text."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[3:]
    rows = [line.split("\t", 1) for line in lines if "\t" in line]
    return [r[1] for r in rows], [r[0] for r in rows]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="a folder with *-train.tab and *-test.tab")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a = p.parse_args()
    if a.data:
        train_texts, train_labels = read_tab(next(a.data.glob("*-train.tab")))
        test_texts, test_labels = read_tab(next(a.data.glob("*-test.tab")))
    else:
        train_texts, train_labels = small_corpus(40, seed=0)
        test_texts, test_labels = small_corpus(15, seed=1)

    pipe = Pipeline([("tfidf", TfidfVectorizer(sublinear_tf=True)),
                     ("knn", KNeighborsClassifier(metric="cosine", device=a.device))])  # cosine: both weights apply
    grid = {"knn__n_neighbors": [5, 15, 30], "knn__weights": ["similarity", "uniform"]}
    search = GridSearchCV(pipe, grid, cv=3).fit(train_texts, train_labels)
    print(f"best parameters: {search.best_params_} (cross-validated accuracy {search.best_score_:.3f})")
    print(f"test accuracy (micro-F1): {search.score(test_texts, test_labels):.3f} on {len(test_texts)} documents")


if __name__ == "__main__":
    main()
