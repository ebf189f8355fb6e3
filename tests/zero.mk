# tests/zero.mk - ZeRO-1 (tr_desc.zero: the optimizer state sharded over the MPI ranks) under a real
# mpirun, with tests/mpi.mk's binaries (build/mpi/test_mpi, test_mpi_plain, train_mpi) and settings.
#
#   make test-mpi-zero   with 2 and 3 ranks, each against the same run without zero at the same world size:
#                        - parameters and the last step's (clipped) gradients bit-identical: AdamW with
#                          clipping by norm, SGD with momentum and accumulation, clipping folded into the
#                          update (clip=0.01), a model of 15 floats (ranks with an empty shard), one of
#                          2.1M floats (shards beyond one exchange round and one send chunk), parameter
#                          groups (param_group: lr multipliers, a weight decay, a frozen tensor in the partial
#                          last block or split by a shard boundary, AdamW and SGD-momentum; the frozen tensor
#                          checked unchanged); every rank keeps exactly its shard (tr_optim_state_bytes)
#                        - checkpoints: written at 2 ranks sharded, sync and async, byte-identical to the
#                          unsharded run's; resumed at 2 ranks sharded and unsharded == the uninterrupted
#                          2-rank run; at 3 ranks sharded == 3 ranks unsharded from the same file; at 1
#                          rank from it == 1 rank from the unsharded run's file
#                        - refused at tr_init with a clear message (zero=2, plain SGD, on_device, ranks that differ,
#                          a build without TRAIN_MPI), lr_finder refused, failed saves (rank 0 cannot
#                          write; a hook fails on the last rank) end every rank alike without a hang;
#                          model_checkpoint (sync and async), a failure, skip_step and SIGTERM on the last
#                          rank (test_mpi's scenarios) with zero; the example with --zero
# Every mpirun is under `timeout`. Needs Open MPI (scripts/deps.sh).
ZERO_DIR := $(BUILD)/mpi/zero

.PHONY: test-mpi-zero
TEST_TARGETS += test-mpi-zero

test-mpi-zero: $(MPI_DIR)/test_mpi $(MPI_DIR)/test_mpi_plain $(MPI_DIR)/train_mpi
	@set -e; mkdir -p $(ZERO_DIR); cd $(ZERO_DIR); rm -rf *.bin *.ckpt* mc; \
	R="env $(MPI_ENV) OMPI_MCA_mpi_yield_when_idle=1 timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe"; T=../test_mpi; \
	same() { cmp -s $$1 $$2 || { echo "test-mpi-zero: $$3: $$1 and $$2 differ"; exit 1; }; }; \
	run() { $$R "$$@" > run.out 2>&1 || { cat run.out; echo "test-mpi-zero: failed: $$*"; exit 1; }; }; \
	for w in 2 3; do for v in "epochs=3" "accum=3 sgd=1" "clip=0.01 epochs=1" "hidden=2 epochs=1" "groups=1 epochs=3" \
	    "groups=2 accum=3 sgd=1 clip=0.01"; do \
	  run -np $$w $$T fit out=u.bin grads=1 $$v; run -np $$w $$T fit out=z.bin zero=1 grads=1 $$v; \
	  same z.bin u.bin "$$w ranks, $$v"; echo "test-mpi-zero: $$w ranks, $$v: bit-identical to the unsharded run ($$(grep '^zero:' run.out | cut -d, -f2-))"; \
	done; done; \
	run -np 2 $$T fit out=u.bin hidden=350000 steps=2 request_at=1 ckpt=ub.ckpt; \
	run -np 2 $$T fit out=z.bin zero=1 hidden=350000 steps=2 request_at=1 ckpt=zb.ckpt; \
	same z.bin u.bin "2.1M parameters"; same zb.ckpt ub.ckpt "2.1M parameters' checkpoints"; \
	echo "test-mpi-zero: 2 ranks, 2.1M parameters (two exchange rounds): bit-identical, and so is the checkpoint ($$(grep '^zero:' run.out | cut -d, -f2-))"; \
	run -np 2 $$T fit out=first.bin zero=1 epochs=2 request_at=13 ckpt=z.ckpt; \
	run -np 2 $$T fit out=first.bin zero=1 async=1 epochs=2 request_at=13 ckpt=za.ckpt; \
	run -np 2 $$T fit out=first.bin epochs=2 request_at=13 ckpt=u.ckpt; \
	same z.ckpt u.ckpt "the checkpoint at step 13"; same za.ckpt u.ckpt "the checkpoint at step 13 (async_save)"; \
	echo "test-mpi-zero: checkpoint written at 2 ranks with zero (sync and async_save) == the unsharded run's, byte for byte"; \
	run -np 2 $$T fit out=straight.bin epochs=4; \
	run -np 2 $$T fit out=r2z.bin zero=1 epochs=4 resume=z.ckpt; run -np 2 $$T fit out=r2u.bin epochs=4 resume=z.ckpt; \
	same r2z.bin straight.bin "resumed at 2 ranks with zero"; same r2u.bin straight.bin "resumed at 2 ranks without zero"; \
	run -np 3 $$T fit out=r3z.bin zero=1 epochs=4 resume=z.ckpt; run -np 3 $$T fit out=r3u.bin epochs=4 resume=z.ckpt; \
	same r3z.bin r3u.bin "resumed at 3 ranks"; \
	run -np 1 $$T fit out=r1z.bin epochs=4 resume=z.ckpt; run -np 1 $$T fit out=r1u.bin epochs=4 resume=u.ckpt; \
	same r1z.bin r1u.bin "resumed at 1 rank"; \
	echo "test-mpi-zero: resumed from it: at 2 ranks (zero or not) == the uninterrupted 2-rank run; at 3 ranks zero == not; at 1 rank == from the unsharded file"; \
	../test_mpi_plain zerobad > scen.out 2>&1 || { cat scen.out; exit 1; }; \
	for w in 2 3; do $$R -np $$w $$T zerobad > scen.out 2>&1 || { cat scen.out; echo "test-mpi-zero: zerobad on $$w ranks failed"; exit 1; }; \
	  for m in mc mcasync; do $$R -np $$w $$T $$m zero=1 > scen.out 2>&1 || { cat scen.out; echo "test-mpi-zero: $$m on $$w ranks failed"; exit 1; }; done; done; \
	for m in fail skip sigterm; do $$R -np 3 $$T $$m zero=1 > scen.out 2>&1 || { cat scen.out; echo "test-mpi-zero: $$m on 3 ranks failed"; exit 1; }; done; \
	echo "test-mpi-zero: refusals (zero=2, plain SGD, on_device, ranks that differ, no TRAIN_MPI), lr_finder, failed saves, model_checkpoint (sync, async), a failure / skip / SIGTERM on one rank: every rank alike, no hang"; \
	$$R -np 2 ../train_mpi | tail -n 1 > plain.out; $$R -np 2 ../train_mpi --zero | tail -n 1 > zero.out; \
	same plain.out zero.out "examples/train_mpi.c with --zero"; echo "test-mpi-zero: examples/train_mpi --zero: $$(cat zero.out)"
	@echo "test-mpi-zero: all passed"
