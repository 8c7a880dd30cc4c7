"""Named shapes for `gputext corpus synth --preset NAME`: the papers' collections and benchmark sizes.

``PRESETS[name]`` is a dict of generator parameters plus ``kind`` ("text" for
:func:`gputext.datasets.synth.write_synth`, "ltr" for :func:`gputext.datasets.ltr.write_ltr`),
``description`` and ``source`` (where the shape comes from). Explicit options override a
preset's fields (see :func:`resolve`).

Decisions where the papers are silent (also in docs/synth.md):

* Reu-10K..70K (clustering paper, Table 3) give documents, terms and the *average* terms per
  document; the generator's ``terms_per_doc`` is a median, so these presets use
  ``mean / exp(length_sigma^2 / 2)`` (the log-normal's median for that mean). The table does not
  give classes: Reuters-v2 (RCV1) is multi-labelled, so the presets have 20 classes, up to 3
  labels a document; weighting ``tf`` (the paper weights by term frequency, compared by cosine).
  Their similarity graphs are not denser than real Reuters text: at beta 0.25 reu-70k has 7.6%
  of all pairs as edges, while Reuters-21578 R8 / R52 (all documents, `gputext corpus build`,
  English stopwords removed, tf) have 15.8% / 12.0% (11.2% for R8 without its five most frequent
  terms); docs/star.md has the measurements.  ``reu-*-tfidf`` are the same shapes with tf-idf
  weighting and strong topics (topic_weight 0.8, topic_size 100: 80% of tokens from a label's
  100-term topic), calibrated so that at R8's shape (7,674 docs, 23,418 terms, 44.5 terms/doc)
  the graph has 1.80% / 0.60% of pairs as edges at beta 0.25 / 0.35, against 1.96% / 0.67% for
  R8 and 2.00% / 0.71% for R52 under tf-idf (with the tf presets' topics, tf-idf gives no edge
  at all): a sparse graph of the same corpus shape.
  Tdt-65K of the same table: 30 topics (TDT2's usual count), single-label.
* pubmed: 5.5M documents (the stream paper's collection), median 55 terms a document (same
  paper), 141,043 terms (the vocabulary of UCI's PubMed bag-of-words, which the paper used);
  50 classes (topic structure for the clusterer; PubMed has no labels). ``--n-docs`` scales it.
* RankSVM paper, Table 1: rows (l), features (n), levels (k), queries (|Q|), largest query
  (l_L) exactly as printed (MQ2007 k = 2 and MSLR-WEB10K k = 2 are the table's values, not the
  public datasets'). The table's pair counts (p) are matched to within about 1% on average by
  tuning ``level_ratio`` (graded sets) or ``size_sigma`` (list sets and WEB10K).
"""
from __future__ import annotations

import math

from gputext.errors import InputError

_SIGMA = 0.6
_REU_SOURCE = "CUDA-OClus/DClus paper, Table 3 (papers/cuda-oclus-dclus-overlapping-star-clustering.txt)"
_RANK_SOURCE = "RankSVM paper, Table 1 (papers/ranksvm-tron-gpu.txt)"


def _median_for_mean(mean: float, sigma: float = _SIGMA) -> float:
    return round(mean / math.exp(sigma * sigma / 2), 1)


def _reu(n_docs: int, n_terms: int, mean_terms: int, weighting: str = "tf") -> dict:
    extra = "" if weighting == "tf" else (f", {weighting} weighting and strong topics (graph density of real "
                                          "Reuters under tf-idf)")
    topics = {} if weighting == "tf" else {"topic_weight": 0.8, "topic_size": 100}
    return {"kind": "text", "n_docs": n_docs, "n_terms": n_terms, "terms_per_doc": _median_for_mean(mean_terms),
            "n_classes": 20, "multilabel": True, "max_labels": 3, "weighting": weighting, **topics,
            "description": f"Reuters-v2 shape: {n_docs:,} docs, {n_terms:,} terms, {mean_terms} terms/doc on average, "
                           f"20 overlapping classes{extra}",
            "source": _REU_SOURCE}


_REU_TABLE3 = {"reu-10k": (10000, 33370, 27), "reu-20k": (20000, 48493, 41), "reu-30k": (30000, 59413, 50),
               "reu-40k": (40000, 70348, 58), "reu-50k": (50000, 74720, 64), "reu-60k": (60000, 81632, 69),
               "reu-70k": (70000, 91490, 76)}


def _ltr(n_docs, n_features, n_levels, n_queries, pairs, largest, relevance="graded", **extra) -> dict:
    return {"kind": "ltr", "n_docs": n_docs, "n_features": n_features, "n_levels": n_levels,
            "n_queries": n_queries, "docs_per_query": round(n_docs / n_queries, 3),
            "max_docs_per_query": largest, "relevance": relevance, **extra,
            "description": f"{n_docs:,} rows, {n_features} features, {n_queries:,} queries (largest {largest:,}), "
                           f"{n_levels:,} relevance levels, {pairs:,} preference pairs in the table",
            "source": _RANK_SOURCE, "table_pairs": pairs}


PRESETS: dict[str, dict] = {
    "demo": {"kind": "text", "n_docs": 3000, "n_terms": 2000, "terms_per_doc": 40, "n_classes": 6,
             "weighting": "tfidf", "description": "the `make demo` corpus: 3,000 docs, 2,000 terms, 6 classes",
             "source": "gputext (sized to run the whole demo in seconds)"},
    "ltr-demo": {"kind": "ltr", "n_queries": 100, "docs_per_query": 30, "n_features": 46, "n_levels": 5,
                 "description": "small learning-to-rank set: 100 queries, about 3,000 rows, 46 features, levels 0-4",
                 "source": "gputext (LETOR-like feature count)"},
    **{name: _reu(*shape) for name, shape in _REU_TABLE3.items()},
    **{f"{name}-tfidf": _reu(*shape, weighting="tfidf") for name, shape in _REU_TABLE3.items()},
    "tdt-65k": {"kind": "text", "n_docs": 65945, "n_terms": 114828, "terms_per_doc": _median_for_mean(210),
                "n_classes": 30, "weighting": "tf",
                "description": "TDT2 shape: 65,945 docs, 114,828 terms, 210 terms/doc on average, 30 topics",
                "source": _REU_SOURCE},
    "pubmed": {"kind": "text", "n_docs": 5_500_000, "n_terms": 141_043, "terms_per_doc": 55, "n_classes": 50,
               "weighting": "tfidf",
               "description": "PubMed-like stream: 5.5M docs (scale with --n-docs), median 55 terms/doc, "
                              "141,043 terms, 50 topics",
               "source": "stream clustering paper (papers/stream-clustering-ell.txt) + UCI bag-of-words PubMed vocabulary"},
    "knn-1e5": {"kind": "text", "n_docs": 100_000, "n_terms": 200_000, "terms_per_doc": 60, "n_classes": 20,
                "weighting": "tfidf", "description": "kNN benchmark: 10^5 docs, 200,000 terms, median 60 terms/doc, 20 classes",
                "source": "gputext kNN benchmarks (GT-kNN-like sparse tf-idf)"},
    "knn-1e6": {"kind": "text", "n_docs": 1_000_000, "n_terms": 200_000, "terms_per_doc": 60, "n_classes": 20,
                "weighting": "tfidf", "description": "kNN benchmark: 10^6 docs, 200,000 terms, median 60 terms/doc, 20 classes",
                "source": "gputext kNN benchmarks (GT-kNN-like sparse tf-idf)"},
    "knn-1e7": {"kind": "text", "n_docs": 10_000_000, "n_terms": 200_000, "terms_per_doc": 60, "n_classes": 20,
                "weighting": "tfidf", "description": "kNN benchmark: 10^7 docs, 200,000 terms, median 60 terms/doc, 20 classes",
                "source": "gputext kNN benchmarks (GT-kNN-like sparse tf-idf)"},
    "mq2007": _ltr(42_158, 46, 2, 1_017, 246_015, 147, level_ratio=0.176),
    "mq2008": _ltr(9_630, 46, 3, 471, 52_325, 121, level_ratio=0.338),
    "mq2007-list": _ltr(743_790, 46, 1_268, 1_017, 285_943_893, 1_268, relevance="list", size_sigma=0.23),
    "mq2008-list": _ltr(540_679, 46, 1_831, 471, 323_151_792, 1_831, relevance="list", size_sigma=0.207),
    "mslr-web10k": _ltr(723_421, 136, 2, 6_000, 31_783_391, 809, level_ratio=1.0, size_sigma=0.711),
    "mslr-web30k": _ltr(2_270_296, 136, 5, 18_919, 101_312_036, 1_251, level_ratio=0.462),
}

TEXT_FIELDS = ("n_docs", "n_terms", "terms_per_doc", "n_classes", "multilabel", "max_labels", "topic_weight",
               "topic_size", "zipf_exponent", "zipf_offset", "length_sigma", "weighting", "seed", "model_seed")
LTR_FIELDS = ("n_docs", "n_queries", "docs_per_query", "n_features", "n_levels", "density", "max_docs_per_query",
              "relevance", "noise", "level_ratio", "size_sigma", "seed", "model_seed")
_META = ("kind", "description", "source", "table_pairs")

TEXT_DEFAULTS = {"terms_per_doc": 60, "n_classes": 10}
LTR_DEFAULTS = {"docs_per_query": 40, "n_features": 46, "n_levels": 5}


def resolve(preset: str | None, kind: str | None = None, **overrides) -> tuple[str, dict]:
    """(kind, generator parameters) of a preset with explicit overrides (None = not given).

    Without a preset, ``kind`` (default "text") picks the generator and the required sizes must
    be given (text: n_docs and n_terms; ltr: n_queries). An option of the other kind is an error.
    For an LTR preset, changing n_queries or docs_per_query without n_docs drops the preset's
    exact row count and max_docs_per_query (rows follow n_queries x docs_per_query).
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    if preset is not None:
        if preset not in PRESETS:
            raise InputError(f"unknown preset {preset!r}: expected one of {', '.join(PRESETS)} "
                             "(see `gputext corpus synth --list-presets`)")
        base = {k: v for k, v in PRESETS[preset].items() if k not in _META and v is not None}
        preset_kind = PRESETS[preset]["kind"]
        if kind is not None and kind != preset_kind:
            raise InputError(f"--kind {kind} does not match preset {preset!r}, which is {preset_kind}")
        kind = preset_kind
    else:
        kind = kind or "text"
        base = dict(TEXT_DEFAULTS if kind == "text" else LTR_DEFAULTS)
    if kind not in ("text", "ltr"):
        raise InputError(f"kind must be text or ltr, got {kind!r}")
    fields = TEXT_FIELDS if kind == "text" else LTR_FIELDS
    wrong = [k for k in given if k not in fields]
    if wrong:
        what = "a text corpus" if kind == "text" else "learning-to-rank data"
        opts = ", ".join("--" + k.replace("_", "-") for k in wrong)
        raise InputError(f"{opts} does not apply to {what}" + (f" (preset {preset!r})" if preset else
                                                                  " (use --kind ltr for learning-to-rank options)"))
    if kind == "ltr" and preset is not None and ("n_queries" in given or "docs_per_query" in given) \
            and "n_docs" not in given:
        base.pop("n_docs", None)
        if "max_docs_per_query" not in given:
            base.pop("max_docs_per_query", None)
    params = {**base, **given}
    required = ("n_docs", "n_terms") if kind == "text" else ("n_queries",)
    missing = [k for k in required if k not in params]
    if missing:
        opts = " and ".join("--" + k.replace("_", "-") for k in missing)
        raise InputError(f"give --preset NAME (see --list-presets) or {opts}")
    return kind, params


def describe_presets() -> str:
    """The --list-presets text: one line per preset (name, kind, shape), then where it comes from."""
    width = max(len(name) for name in PRESETS)
    lines = []
    for name, p in PRESETS.items():
        lines.append(f"{name:<{width}}  {p['kind']:<4}  {p['description']}")
        lines.append(f"{'':<{width}}        from: {p['source']}")
    return "\n".join(lines)
