"""`gputext cluster stream`: single-pass stream clustering (thin: validate, call one library function)."""
from __future__ import annotations

import sys

import click

from gputext.cli_common import FiniteFloat, check_paths, corpus_path, device_option, pick_backend, quiet_option
from gputext.errors import InputError


@click.command("stream")
@click.argument("input_path", metavar="INPUT", type=corpus_path())
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Result file (HDF5) for a corpus INPUT; not used with '-' (assignments go to stdout).")
@click.option("--threshold", "-t", type=FiniteFloat(), default=None,
              help="T: a document joins its most similar cluster when the cosine similarity is > T, else starts "
                   "one. Default 0.6, or the --state file's.")
@click.option("--max-terms", "-k", type=int, default=None,
              help="K: terms kept per centroid and per document (top K by weight); the ELL matrix width. "
                   "Default 35, or the --state file's.")
@click.option("--batch-size", type=int, default=None,
              help="Documents scored per launch (default 32 on the GPU, 16 on the CPU); 1 = one at a time. "
                   "Results are identical for every batch size.")
@click.option("--candidates", type=click.Choice(["auto", "scan", "index"]), default="auto", show_default=True,
              help="scan: every cluster through the ELL matrix; index: clusters sharing a term (CPU only); "
                   "auto: scan on the GPU, the cheaper of the two per batch on the CPU.")
@click.option("--idf-from", type=click.Path(dir_okay=False),
              help="JSONL input: reference corpus whose vocabulary and df/N give tf-icf weights "
                   "(as `corpus build --weighting tficf --vocab-from`); without it they are updated as the stream goes.")
@click.option("--stopwords", default="english", show_default=True,
              help="JSONL input: english, none, or a word-list file (as `corpus build`).")
@click.option("--state", type=click.Path(dir_okay=False),
              help="Checkpoint (HDF5): loaded when it exists, so the stream continues; written at the end, "
                   "every --checkpoint-every documents, and when SIGINT/SIGTERM stops the stream.")
@click.option("--checkpoint-every", type=int, default=0, show_default=True,
              help="JSONL input: also write --state every N documents (0: only at the end).")
@device_option
@quiet_option
def stream(input_path, output, threshold, max_terms, batch_size, candidates, idf_from, stopwords, state,
           checkpoint_every, device, quiet):
    """Cluster documents in one pass, in arrival order (Szaszy & Samet's stream clustering, exact).

    Each document joins its most similar cluster if the similarity is > T, else starts a new
    cluster; a centroid keeps its top K terms. The centroids live in an ELLPACK matrix on the
    GPU (the CPU twin or an inverted index on the CPU). The assignments are identical, document by
    document, to the sequential algorithm for every device and batch size.

    Reads a corpus file (its rows as stored, in order; build it with --weighting tficf) and
    writes -o OUT.h5: /obs/cluster int32 (plus similarity, new_cluster, the input's label) and
    /uns/gputext/stream (parameters, centroids as ELL arrays, sizes, latency, throughput).
    Or reads JSONL {"id": ..., "text": ...} lines from stdin ('-') and writes one JSON line per
    document ({"id", "cluster", "similarity", "new"}) to stdout as soon as it is decided.
    Prints latency percentiles and throughput at the end (stderr). Runs on --device.

    \b
    Example:
      gputext cluster stream corpus.h5 -t 0.6 -k 35 -o clusters.h5
      gputext cluster eval clusters.h5 corpus.h5
      cat docs.jsonl | gputext cluster stream - --idf-from ref.h5 --state s.h5 > assignments.jsonl
    """
    for name, value, low in (("--max-terms", max_terms, 1), ("--batch-size", batch_size, 1),
                             ("--checkpoint-every", checkpoint_every, 0)):
        if value is not None and value < low:
            raise InputError(f"{name} must be >= {low}, got {value}")
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise InputError(f"--threshold must be in [0, 1], got {threshold}")
    # --state is read and rewritten (a checkpoint): it may be neither the input nor -o
    check_paths([("INPUT", input_path), ("--idf-from", idf_from)], [("-o", output), ("--state", state)])
    from gputext.cluster.stream_io import cluster_corpus, cluster_jsonl
    if candidates == "index" and device == "auto":
        device = "cpu"  # the inverted index is the CPU's algorithm
    if input_path == "-":
        if output:
            raise InputError("-o is for a corpus INPUT; with '-' (JSONL on stdin) the assignments go to stdout")
        backend = pick_backend(device, quiet)
        cluster_jsonl(sys.stdin, sys.stdout, threshold, max_terms, batch_size=batch_size, candidates=candidates,
                      idf_from=idf_from, stopwords=stopwords, state=state, checkpoint_every=checkpoint_every,
                      quiet=quiet, backend=backend)
        return
    if not output:
        raise InputError(f"-o OUT.h5 is required for a corpus INPUT ({input_path})")
    if idf_from:
        raise InputError("--idf-from is for JSONL input ('-'); a corpus file is clustered with the weights it stores")
    backend = pick_backend(device, quiet)
    cluster_corpus(input_path, output, threshold, max_terms, batch_size=batch_size, candidates=candidates,
                   state=state, quiet=quiet, backend=backend)
