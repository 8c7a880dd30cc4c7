.PHONY: bench-knn bench-knn-quick
# Exact sparse kNN against CuPy, PyTorch, scikit-learn and the CPU twin (GPU host: all peers; elsewhere CPU peers)
bench-knn: $(STAMP)
	$(BIN)/python scripts/bench_knn.py --sizes 1e5,1e6 --queries 1,100,10000 --out out/bench_knn
bench-knn-quick: $(STAMP)
	$(BIN)/python scripts/bench_knn.py --quick --out out/bench_knn

demo-steps::
	$(BIN)/gputext knn index $(DEMO)/split/train.h5 -o $(DEMO)/train.index.h5
	$(BIN)/gputext knn search --index $(DEMO)/train.index.h5 --queries $(DEMO)/split/test.h5 -k 10 -o $(DEMO)/neighbours.h5
