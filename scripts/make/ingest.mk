.PHONY: bench-ingest
# Ingest speed on the real datasets (../shared/datasets or $GPUTEXT_DATASETS)
bench-ingest: $(STAMP)
	$(BIN)/python scripts/bench_ingest.py
