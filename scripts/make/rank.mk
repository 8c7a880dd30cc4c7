# RankSVM (gputext rank): the paper's Tables 2-3 and Figure 1, the GPU script, demo steps.
RANK_OUT ?= out/rank
# e.g. make table-rank RANK_TABLE_ARGS="--scale 0.1" on a machine without a GPU
RANK_TABLE_ARGS ?=

.PHONY: table-rank

# Table 2 (training time), Table 3 (pairwise accuracy), Figure 1 (relative objective difference vs
# time): GPU vs CPU twin on synthetic sets of the paper's Table 1 shapes and on letor-sample.
table-rank: $(STAMP)
	$(BIN)/python scripts/table_rank.py --out $(RANK_OUT) $(RANK_TABLE_ARGS)

# Exactness at scale + the issue-7 goals + peers (on the GPU host; --device cpu elsewhere).
$(eval $(call script_targets,gpu-rank,gpu_rank,RANK_OUT))

# make demo: a small learning-to-rank set, split by query, trained, evaluated and scored.
demo-steps::
	$(BIN)/gputext corpus synth --preset ltr-demo -o $(DEMO)/ltr.h5 --quiet
	$(BIN)/gputext corpus split $(DEMO)/ltr.h5 --test-size 0.2 --seed 1 -o $(DEMO)/ltr-split --quiet
	$(BIN)/gputext rank train $(DEMO)/ltr-split/train.h5 -C 1 --eps 1e-5 -o $(DEMO)/rank-model.h5
	$(BIN)/gputext rank eval $(DEMO)/rank-model.h5 $(DEMO)/ltr-split/test.h5
	$(BIN)/gputext rank predict $(DEMO)/rank-model.h5 $(DEMO)/ltr-split/test.h5 -o $(DEMO)/rank-scores.h5 --quiet
