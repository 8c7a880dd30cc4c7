"""Device side of gputext, installed as ``gputext.kernels`` (setup.py maps this top-level folder).

Kernels take only C-contiguous arrays of fixed dtypes with caller-allocated outputs; launch
geometry is always a parameter. Every kernel has a CPU twin (``numba.njit``) that runs the same
per-item function: written once as plain Python and compiled for both targets. Host code reaches
the device through gputext.backend / gputext.engine, never by importing numba.cuda itself.

What lives where:

    primitives.py   building blocks, each compiled for the device (``*_dev``) and the CPU
                    (``*_cpu``): the tie comparator (key descending, id ascending), lower bound,
                    float32 ordered bits, bitonic sorts of (key, id) pairs and of keys, block scans,
                    block tree sums, and (device only) the chunk walk of the blocked and grouped top-k kernels
    select.py       the one selection library: a running best-k list (CPU), block-wide top-k of a
                    segment (sort or counting), the dense kNN's radix block selection
    metrics.py      the one table of metric names and codes (cosine, dot, l2, l1); no numba
    geometry.py     next_pow2, blocks: launch arithmetic for kernels and host; no numba
    jit.py          cpu_jit and cuda_kernel: every twin and kernel compiled through them is kept in
                    the on-disk kernel cache ($GPUTEXT_CACHE_DIR; docs/ARCHITECTURE.md)
    _factory.py     kernel_cache (one compilation per geometry), jit_kernel (register caps)
    scan.py         exclusive prefix sum of a device array (index build, graph offsets)

  sparse scoring engine (gputext.engine):
    scoring.py      fixed-point accumulation, keys, per-query statistics, top-k and threshold
                    kernels and their CPU twins
    postings.py     the inverted index's build (postings by term, document norms) and its
                    block-starts table (each document block's first posting of the long lists)
    blocked.py      accumulation by document blocks in shared memory: the rows top-k's
                    accumulation into score rows (rows_accumulate_kernel, the GPU default; its
                    posting ranges in a batch by block_ranges_kernel) and
                    the blocked top-k method with its safe-pruning bounds
    unit_select.py  the rows top-k's select from the shared accumulation's keys and units' maxima
                    (one block a query, exact: theta from the k best units; the GPU default)
    grouped.py      grouped top-k (k best per query, group and metric)
    centroids.py    the kNN meta-features' centroid columns (host, both backends)
  dense kNN (gputext.knn.dense):
    dense_knn.py    the pipeline's entry point (re-exports the three stage modules)
    dense_common.py canonical float64 sums and final scores
    dense_keys.py   stage 1: approximate float32 keys (matvec, register-tiled GEMM)
    dense_exact.py  stage 2: candidate selection, exact rescoring, merge + sort, certificate
  linear learners (gputext.rank, gputext.linear):
    products.py     the CPU twins of X v, X^T u, X B and X^T B (RankSVM's one column, the SVM's
                    block of columns), written once for both; no numba.cuda
    linear_svm.py   the one-vs-rest SVM's device products, squared-hinge terms and column algebra
                    (kernels and twins)
  RankSVM (gputext.rank):
    ranksvm.py      pair structure (sort, binary searches, wavelet matrix), matvecs, finishes: the
                    per-item functions and CPU twins (no numba.cuda: the CPU path starts without it)
    ranksvm_cuda.py their CUDA kernels (imported only by gputext/rank/cuda_ops.py)
  clustering (gputext.cluster):
    stream_ell.py   stream clustering's best-cluster search over the ELL centroid matrix
                    (its host side is gputext/cluster/stream_host.py)
    star.py         star clustering's relevance, edge writes and symmetric graph kernels (+ the
                    numba host code of the graph build)
"""
