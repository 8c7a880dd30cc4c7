# Star clustering (OClustR / DClustR): paper reproduction and demo steps.
STAR_OUT ?= out/star

# Tables 4-5 and Figures 17-19 of the CUDA-OClus/DClus paper (markdown + PNG in $(STAR_OUT)/).
# Full size runs the CPU twin up to 70,000 documents: long on a laptop (use table-star-quick).
$(eval $(call script_targets,table-star,table_star,STAR_OUT))

demo-steps::
	$(BIN)/gputext cluster star $(DEMO)/split/train.h5 --beta 0.1 -o $(DEMO)/star.h5
	$(BIN)/gputext cluster star --update $(DEMO)/star.h5 --add $(DEMO)/split/test.h5 -o $(DEMO)/star_updated.h5
	$(BIN)/gputext cluster eval $(DEMO)/star_updated.h5 --truth $(DEMO)/corpus.h5 --plot $(DEMO)/star_sizes.png
