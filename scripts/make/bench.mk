# The benchmark registry (benchmarks/: python -m benchmarks.run --list shows every entry).
BENCH_SUITE ?= readme
BENCH_DEVICE ?= auto
BENCH_OUT ?= out/bench

.PHONY: bench bench-render bench-papers

# The README suite: every figure of the README's tables measured again (GPU entries skipped
# without a GPU), appended to benchmarks/records/, then the tables and the figure rendered.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run --suite $(BENCH_SUITE) --device $(BENCH_DEVICE) --out $(BENCH_OUT)
	$(BIN)/python -m benchmarks.render --plot

# README.md, docs/*.md and benchmarks/RESULTS.md rewritten from benchmarks/records/ (and summary.png).
bench-render: $(STAMP)
	$(BIN)/python -m benchmarks.render --plot

# Every paper table at once (the table-* targets one by one are in the other scripts/make/*.mk).
bench-papers: $(STAMP)
	$(BIN)/python -m benchmarks.run --suite papers --device $(BENCH_DEVICE) --out $(BENCH_OUT)/papers
