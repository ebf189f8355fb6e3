# train.h examples and `make demo` (included by the top Makefile; hooks.h examples are in examples.mk).
#   make demo             install what the demo needs when missing (a C compiler, libstb-dev), build build/demo, run it
#   make examples         build every example, these included
#   make train-examples   build and run every train.h example once (each takes well under a second)
# All of them share the model and data in examples/mlp.h.
TR_EX_DEPS  := hooks.h train.h examples/mlp.h
TR_EX_NAMES := demo first_trainer train_resume train_callback train_control train_trace train_callbacks train_rescue sweep finetune
TR_EX_BINS  := $(addprefix $(BUILD)/,$(TR_EX_NAMES))
EXAMPLES    += $(TR_EX_BINS)

.PHONY: train-examples
demo:
	@sh scripts/deps.sh demo
	@$(MAKE) --no-print-directory -q $(BUILD)/demo || $(MAKE) --no-print-directory $(BUILD)/demo
	@rm -rf $(BUILD)/checkpoints; $(BUILD)/demo $(BUILD)/checkpoints $(BUILD)/runs

$(TR_EX_BINS): $(BUILD)/%: examples/%.c $(TR_EX_DEPS) | $(BUILD)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

# Each example checks its own claim (accuracy reached, parameters identical, state restored, ...) and
# exits nonzero when it does not hold. The checkpoint examples write their files into $(BUILD).
train-examples: $(TR_EX_BINS)
	@rm -rf $(BUILD)/first_run # (first_trainer resumes its last run: a finished one from an earlier make test is refused)
	@set -e; for x in $(TR_EX_NAMES); do \
	  echo "== $(BUILD)/$$x"; (cd $(BUILD) && ./$$x) >$(BUILD)/$$x.out 2>&1 || { cat $(BUILD)/$$x.out; exit 1; }; \
	  tail -n 3 $(BUILD)/$$x.out; done
	@grep -q '^look at them:  tensorboard --logdir runs$$' $(BUILD)/demo.out
	@grep -q '^  (no tensorboard command? python3 -m venv venv && venv/bin/pip install tensorboard, then$$' $(BUILD)/demo.out
	@# first_trainer run twice (20 epochs, then resumed to 40) ends with the weights of one 40-epoch run
	@cd $(BUILD) && rm -rf first_a first_b && ./first_trainer first_a 20 >first_a.out 2>&1 && ./first_trainer first_a 40 >first_a2.out 2>&1 \
	  && ./first_trainer first_b 40 >first_b.out 2>&1 || { cat first_a.out first_a2.out first_b.out; exit 1; }
	@grep -q '^resumed from last.ckpt' $(BUILD)/first_a2.out && test "$$(grep '^weights' $(BUILD)/first_a2.out)" = "$$(grep '^weights' $(BUILD)/first_b.out)" \
	  || { echo "first_trainer: the resumed run does not end with the weights of one run"; exit 1; }
	@# the resumed run continues its run: the same version_0, as many rows as one 40-epoch run's, no version_1
	@ls $(BUILD)/first_a/runs/lightning_logs/version_0/events.out.tfevents.* >/dev/null && test ! -e $(BUILD)/first_a/runs/lightning_logs/version_1 \
	  && test "$$(wc -l < $(BUILD)/first_a/runs/lightning_logs/version_0/metrics.csv)" = "$$(wc -l < $(BUILD)/first_b/runs/lightning_logs/version_0/metrics.csv)" \
	  || { echo "first_trainer: the resumed run did not continue in version_0 with one run's rows"; exit 1; }
	@# its predictions: a header and the 64 validation inputs' rows, in the run directory
	@f=$(BUILD)/first_b/runs/lightning_logs/version_0/predictions/sin3x-40.csv; test "$$(head -n 1 $$f)" = "batch,row,x,y,sin3x" \
	  && test "$$(wc -l < $$f)" = 65 && test -s $(BUILD)/first_a/runs/lightning_logs/version_0/predictions/sin3x-20.csv \
	  || { echo "first_trainer: its predictions are not in $$f"; exit 1; }
	@d=$$(sed -n 's/^logs in \([^:]*\): .*/\1/p' $(BUILD)/demo.out); for f in metrics.csv metrics.jsonl hparams.yaml metrics.svg; do \
	  test -s $(BUILD)/$$d/$$f || { echo "demo: $(BUILD)/$$d/$$f is missing"; exit 1; }; done; ls $(BUILD)/$$d/events.out.tfevents.* >/dev/null
	@echo "train-examples: all passed"
