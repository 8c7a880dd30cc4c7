# Synthetic corpora (`gputext corpus synth`, datasets/): benchmarks and the papers' shapes.
SYNTH_DIR ?= out/synth

.PHONY: synth-papers

# Throughput and peak memory of the generator (CPU): 10^5 and 10^6 documents, two LTR presets.
$(eval $(call script_targets,bench-synth,bench_synth,SYNTH_DIR))

# The collections of the papers' tables as synthetic files (Reu-10K..70K, Tdt-65K, RankSVM Table 1).
synth-papers: $(STAMP)
	@mkdir -p $(SYNTH_DIR)
	for p in reu-10k reu-20k reu-30k reu-40k reu-50k reu-60k reu-70k tdt-65k \
	         mq2007 mq2008 mq2007-list mq2008-list mslr-web10k mslr-web30k; do \
	  $(BIN)/gputext corpus synth --preset $$p -o $(SYNTH_DIR)/$$p.h5 || exit 1; done
