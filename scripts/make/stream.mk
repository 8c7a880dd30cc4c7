# Stream clustering (Szaszy & Samet): paper reproduction and demo steps.
STREAM_OUT ?= out/stream

# Figures 3, 4a, 4b of the stream-clustering paper and 20NG/R8 quality (markdown + PNG in $(STREAM_OUT)/).
# Runs on the GPU when there is one (adds the GPU curve), else on the CPU (a few minutes on 2 cores).
$(eval $(call script_targets,table-stream,table_stream,STREAM_OUT))

# The demo corpus clustered in one pass; then a live JSONL stream in two halves through a state file.
demo-steps::
	$(BIN)/gputext cluster stream $(DEMO)/corpus.h5 --threshold 0.1 --max-terms 35 -o $(DEMO)/stream.h5
	$(BIN)/gputext cluster eval $(DEMO)/stream.h5 --truth $(DEMO)/corpus.h5
	@rm -f $(DEMO)/stream_state.h5
	@printf '%s\n' '{"id": "n1", "text": "t12 t40 t40 t7 t300 t5"}' '{"id": "n2", "text": "t12 t40 t7 t300 t9"}' \
	  | $(BIN)/gputext cluster stream - --idf-from $(DEMO)/corpus.h5 --threshold 0.3 --state $(DEMO)/stream_state.h5
	@printf '%s\n' '{"id": "n3", "text": "t12 t40 t7 t301"}' '{"id": "n4", "text": "t1500 t1501 t1999"}' \
	  | $(BIN)/gputext cluster stream - --state $(DEMO)/stream_state.h5
