# bench/mpi.mk - train.h's MPI strategy: time per step with 1 and 2 ranks, and the gradient point
# through train.h against a bare MPI_Allreduce of the same bytes, in the same run (bench/bench_mpi.c).
#   make bench-mpi                    (hidden width: make bench-mpi BENCH_MPI_HIDDEN=8192)
BENCH_MPI_HIDDEN ?= 4096

.PHONY: bench-mpi
BENCH_TARGETS += bench-mpi
BENCH_BINS += bench_mpi

$(BUILD)/bench_mpi: bench/bench_mpi.c hooks.h train.h examples/mlp.h | $(BUILD)
	$(MPICC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)

bench-mpi: $(BUILD)/bench_mpi
	@echo "bench-mpi: spirals MLP 2-$(BENCH_MPI_HIDDEN)-3 ($$((6 * $(BENCH_MPI_HIDDEN) + 3)) floats of gradients), batch 16 per rank, medians of 1000 steps"
	@echo "ranks  time/step      gradient point   bare MPI_Allreduce   bare all-reduce+average   train.h's extra (paired median)"
	@$(MPI_ENV) timeout 300 $(MPIRUN) --oversubscribe -np 1 $(BUILD)/bench_mpi $(BENCH_MPI_HIDDEN)
	@$(MPI_ENV) timeout 300 $(MPIRUN) --oversubscribe -np 2 $(BUILD)/bench_mpi $(BENCH_MPI_HIDDEN)

# ZeRO-1 (tr_desc.zero) against the unsharded run, in the same processes (bench/bench_zero.c): optimizer
# state and training state per parameter per rank, the step and the optimizer phase, each
# "unsharded -> zero (ratio)", with 2 and 3 ranks, on a model whose forward and backward are one pass.
#   make bench-mpi-zero               (parameters: make bench-mpi-zero BENCH_ZERO_N=16777216)
BENCH_ZERO_N ?= 1048576
.PHONY: bench-mpi-zero
BENCH_TARGETS += bench-mpi-zero
BENCH_BINS += bench_zero
$(BUILD)/bench_zero: bench/bench_zero.c hooks.h train.h | $(BUILD)
	$(MPICC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS)
bench-mpi-zero: $(BUILD)/bench_zero
	@echo "bench-mpi-zero: $(BENCH_ZERO_N) parameters, AdamW, clipping by norm, medians of 3 x 100 steps each, taken in turns; each column: unsharded -> zero (ratio), the largest over the ranks"
	@echo "ranks     params   optimizer state/param   training state/param    time/step                      optimizer phase"
	@$(MPI_ENV) timeout 300 $(MPIRUN) --oversubscribe -np 2 $(BUILD)/bench_zero $(BENCH_ZERO_N)
	@$(MPI_ENV) timeout 300 $(MPIRUN) --oversubscribe --mca mpi_yield_when_idle 1 -np 3 $(BUILD)/bench_zero $(BENCH_ZERO_N)
