"""Linear RankSVM (L2 loss, TRON) with per-query pair statistics.

    from gputext.rank import train, train_grid, predict_scores, evaluate, RankModel
    model = train(corpus, C=1.0, eps=1e-5, device="auto")     # corpus with /obs/qid, /obs/relevance
    model.save("model.h5"); model = RankModel.load("model.h5")
    scores = predict_scores(model, test_corpus)                # float64, X w
    metrics = evaluate(model, test_corpus)                     # pairwise accuracy, NDCG@1/5/10, MAP

Lower level: gputext.rank.data.prepare (grouping, checks), gputext.rank.objective.RankObjective
(f, gradient, Hessian-vector products), gputext.rank.tron.tron, gputext.rank.metrics; gputext.rank.api holds the entry points.
Names are imported on first use, so ``import gputext.rank`` stays cheap for the CLI.
"""
from importlib import import_module

_NAMES = {
    "train": "api", "train_data": "api", "train_grid": "api", "predict_scores": "api", "evaluate": "api",
    "RankModel": "model", "RankObjective": "objective", "RankGeometry": "ops", "prepare": "data",
    "RankingData": "data", "ranking_metrics": "metrics", "pairwise_accuracy": "metrics",
}

__all__ = sorted(_NAMES)


def __getattr__(name):
    if name in _NAMES:
        return getattr(import_module(f"{__name__}.{_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
