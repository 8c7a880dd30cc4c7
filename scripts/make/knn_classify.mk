# kNN classification, meta-features and the dense method (issue 4): paper tables and a demo step.
KNN_CLASSIFY_OUT ?= out/knn_classify

.PHONY: table-metafeatures table-metafeatures-quick table-cnae gpu-knn-classify

# GT-kNN Tables 2/3 (bag of words vs meta-features vs both) and 4/6 (meta-feature time and peak
# memory: GPU engine, CPU twin, dense GPU baseline) on 20NG, R8, R52, CNAE-9 (../shared/datasets).
table-metafeatures: $(STAMP)
	$(BIN)/python scripts/table_metafeatures.py --out $(KNN_CLASSIFY_OUT)

table-metafeatures-quick: $(STAMP)
	$(BIN)/python scripts/table_metafeatures.py --quick --only cnae9,r8 --out $(KNN_CLASSIFY_OUT)

# CNAE paper Table 1 / Figure 9: time to categorise one document vs training size, with a plot.
table-cnae: $(STAMP)
	$(BIN)/python scripts/table_cnae.py --out $(KNN_CLASSIFY_OUT)

# The GPU round (benchmarks against CuPy/PyTorch, exactness at size, 20NG meta-features).
gpu-knn-classify: $(STAMP)
	$(BIN)/python scripts/gpu_knn_classify.py --out $(KNN_CLASSIFY_OUT)

demo-steps::
	$(BIN)/gputext knn classify --train $(DEMO)/split/train.h5 --test $(DEMO)/split/test.h5 -k 30 -q -o $(DEMO)/knn_pred.h5
	$(BIN)/gputext knn metafeatures --train $(DEMO)/split/train.h5 --test $(DEMO)/split/test.h5 -k 10 -q -o $(DEMO)/meta_test.h5 --train-output $(DEMO)/meta_train.h5
	$(BIN)/gputext knn classify --train $(DEMO)/split/train.h5 --test $(DEMO)/split/test.h5 -k 10 --model svm --features both --C 1 -q
