# tests/mpi.mk - train.h's MPI strategy (TRAIN_MPI) under mpirun (included by the top Makefile).
#
#   make test-mpi           build/test_mpi (mpicc -DTRAIN_MPI) under mpirun -np 1/2/3, against
#                           build/test_mpi_plain (the plain trainer): parameters bit-identical across
#                           ranks; bit-identical to a one-process reference that sums each rank's shard
#                           gradient in rank order (AdamW, SGD-momentum, accumulation with and without a
#                           short last window, either divisor, clipping; 2 and 3 ranks); close to one
#                           process on the same global batches (the difference is printed); world size
#                           1 == the plain build bit for bit; a stop / skip / failure /
#                           SIGTERM / bad resume_from / failing configure_model on one rank ends every rank
#                           the same way; uneven batch counts; rank-zero-only hooks; model_checkpoint and
#                           early_stopping on every rank (rank 0 alone writes files, also in the background: mcasync); a checkpoint requested
#                           on the last rank, written by rank 0, resumed in a new mpirun: exact; ranks that
#                           differ (run length, model size or layout, a refused config, a resume, the
#                           accumulation, the function called, a rank gone early, the parameter groups,
#                           finetuning's schedule) fail
#                           every rank with an error naming the values per rank instead of hanging (test_mpi
#                           mismatch); a refusal at a run's start on one rank only (the run layer's, a directory,
#                           a resume, a hook; tr_fit, tr_validate, tr_predict): every rank fails with its reason
#                           (test_mpi onerank);
#                           on_exception_checkpoint or a hook's tr_save on one rank only: one error everywhere
#                           (oecone, oeczero, saveone); a learning rate changed on one rank (tr_lr_scale,
#                           lr_finder) agreed, bit-identical to every rank changing it; changed differently:
#                           one error (lrdiffer); prediction_writer (test_mpi pw): rank 0 alone writes, or with
#                           {rank} every rank its own files (csv, jsonl, safetensors; checked to hold that
#                           rank's predictions, nothing else in the directory), the run directory's on every
#                           rank, a later process (resume) takes each rank's files back, someone else's file at
#                           one rank's path fails every rank before any batch; a run directory of 1,100 bytes
#                           reaches every rank (test_mpi longdir); the example
#   make test-mpi-nccl      TRAIN_MPI + TRAIN_CUDA (NCCL for device gradients): nvcc build, link, run (see below)
#   make test-mpi-cores     more ranks than cores (--oversubscribe): one warning naming mpi_yield_when_idle
#   make test-mpi-compile   TRAIN_MPI in the implementation TU (C99 with mpicc, also with -Wc++-compat;
#                           C++11 with mpicxx) linked with a user TU built without MPI; the program runs
#                           as one process
# Every mpirun is under `timeout`: a hang fails the test instead of stopping CI. Needs Open MPI
# (openmpi-bin libopenmpi-dev; scripts/deps.sh installs them).
MPICC       ?= mpicc
MPICXX      ?= mpicxx
MPIRUN      ?= mpirun
MPI_TIMEOUT ?= 60
# root in containers; more ranks than cores; no CMA single-copy (needs ptrace rights in Docker); each target's
# session directories under its own base (make test starts several mpiruns at once, and Open MPI 4.1's first mkdir of
# the shared /tmp/ompi.<host>.<uid> races: "File exists", orte_init failed)
MPI_ENV   = OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
            OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_orte_tmpdir_base=$(CURDIR)/$(BUILD)/ompi/$@
MPI_DIR  := $(BUILD)/mpi
MPI_DEPS := tests/test_mpi.c hooks.h train.h examples/mlp.h

.PHONY: test-mpi test-mpi-compile test-mpi-cores
TEST_TARGETS += test-mpi test-mpi-compile test-mpi-cores

$(MPI_DIR):
	@mkdir -p $(MPI_DIR)

$(MPI_DIR)/test_mpi: $(MPI_DEPS) | $(MPI_DIR)
	@command -v $(MPICC) >/dev/null || { echo "test-mpi: $(MPICC) not found: install openmpi-bin libopenmpi-dev (sh scripts/deps.sh)"; exit 1; }
	$(MPICC) $(TEST_CFLAGS) -DTRAIN_MPI -o $@ tests/test_mpi.c $(LDLIBS)
$(MPI_DIR)/test_mpi_plain: $(MPI_DEPS) | $(MPI_DIR)
	$(CC) $(ALL_CFLAGS) $(SAN) -o $@ tests/test_mpi.c $(LDLIBS)
$(MPI_DIR)/train_mpi: examples/train_mpi.c hooks.h train.h examples/mlp.h | $(MPI_DIR)
	$(MPICC) $(ALL_CFLAGS) -o $@ examples/train_mpi.c $(LDLIBS)

test-mpi: $(MPI_DIR)/test_mpi $(MPI_DIR)/test_mpi_plain $(MPI_DIR)/train_mpi
	@set -e; cd $(MPI_DIR); rm -f *.bin *.ckpt*; rm -rf pw[0-9] pwlogs pwck; \
	for w in 2 3; do for v in "epochs=3" "accum=3 sgd=1" "accum=4 sgd=1" "accum=4 sgd=1 mean=1"; do \
	  $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np $$w ./test_mpi fit out=w$$w.bin $$v > fit.out; \
	  ./test_mpi_plain fit out=ref$$w.bin ref=$$w $$v > ref.out; \
	  cmp -s w$$w.bin ref$$w.bin || { echo "test-mpi: $$w ranks ($$v) differ from the rank-order reference"; exit 1; }; \
	  echo "test-mpi: $$w ranks, $$v: identical on every rank and bit-identical to the rank-order reference"; done; done; \
	$(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 1 ./test_mpi fit out=w1.bin > fit.out; \
	./test_mpi_plain fit out=plain.bin > ref.out; \
	cmp -s w1.bin plain.bin || { echo "test-mpi: mpirun -np 1 differs from the plain build"; exit 1; }; \
	echo "test-mpi: mpirun -np 1 == the build without TRAIN_MPI, bit for bit"; \
	for s in "steps=1 1e-6" "epochs=20 1e-4"; do set -- $$s; \
	  $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 2 ./test_mpi fit out=g2.bin $$1 > fit.out; \
	  ./test_mpi_plain fit out=g1.bin global=2 $$1 > ref.out; \
	  printf "test-mpi: 2 ranks vs one process on the same global batches, $$1: "; ./test_mpi_plain diff g2.bin g1.bin $$2; done; \
	for w in 2 3; do for m in stop fail failload configfail skip sigterm uneven rank0 mc plateau mcasync oecone oeczero oecall saveone lrdiffer; do \
	  $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np $$w ./test_mpi $$m > scen.out 2>&1 \
	    || { cat scen.out; echo "test-mpi: scenario $$m on $$w ranks failed"; exit 1; }; \
	  grep "rank 0 of" scen.out; done; done; \
	echo "test-mpi: on_exception_checkpoint on one rank (the failing one, or rank 0), tr_save from a hook on rank 0 only: \
	the same error on every rank at the same step, nothing written, no hang (on every rank: saved); learning rates changed \
	differently: one error (2 and 3 ranks)"; \
	for w in 2 3; do for v in "lr_at=5 lr_on" lrf_on; do \
	  $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np $$w ./test_mpi fit out=lr_all.bin $$v=all > fit.out; \
	  for on in 0 last; do [ "$$v" != lrf_on ] && [ $$on = 0 ] && continue; \
	    $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np $$w ./test_mpi fit out=lr_one.bin $$v=$$on > fit.out; \
	    cmp -s lr_all.bin lr_one.bin || { echo "test-mpi: $$w ranks: $$v=$$on ends unlike $$v=all"; exit 1; }; done; done; done; \
	echo "test-mpi: tr_lr_scale on the last rank only, lr_finder on rank 0 or the last rank only: agreed, bit-identical to every rank doing it (2 and 3 ranks)"; \
	$(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 8 ./test_mpi uneven > scen.out 2>&1 \
	  || { cat scen.out; echo "test-mpi: 8 ranks on 7 batches failed"; exit 1; }; \
	echo "test-mpi: 8 ranks, 7 training and 7 validation batches (no training batch, one rank without validation): no hang"; \
	for w in 2 3; do for m in epochs "size hidden=16,32,16" "size hidden=16,116666,16" "size hidden=16,16,32" names initfail \
	    fitfail val resume files fileszero outofstep calls exit exitinit groups groupsnone groupsequal ft ftequal; do set -- $$m; \
	  $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np $$w ./test_mpi mismatch what=$$1 $$2 > scen.out 2>&1 \
	    || { cat scen.out; echo "test-mpi: mismatch $$m on $$w ranks failed (or hung)"; exit 1; }; done; done; \
	echo "test-mpi: mismatches (max_epochs, 99/195/~700k parameters, tensor names, validation data, a refused tr_init or tr_fit \
	config, a resume on one rank, two checkpoints with the same counters (with and without zero), tr_set_accumulation on one rank, tr_validate vs tr_test, a rank gone before tr_init or tr_fit, \
	parameter groups that differ or a param_group on one rank only, finetuning's schedules that differ; the same groups or \
	finetuning spelt differently run): a clear error on every rank, no hang (2 and 3 ranks)"; \
	for w in 2 3; do for m in spec dir resume done hook valspec predir predhook; do rm -rf onerank.file onerank_done.ckpt; \
	  $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np $$w ./test_mpi onerank what=$$m > scen.out 2>&1 \
	    || { cat scen.out; echo "test-mpi: onerank $$m on $$w ranks failed (or hung)"; exit 1; }; done; done; \
	echo "test-mpi: a refusal at a run's start on one rank only (a param_group naming no tensor in tr_fit and tr_validate, \
	model_checkpoint's or prediction_writer's directory not writable, resume_from missing or with nothing left, an \
	on_fit_start or setup hook failing): every rank fails with that rank's reason, none waits; the next run trains (2 and 3 ranks)"; \
	for m in stop fail skip sigterm uneven rank0 configfail mc mcasync; do ./test_mpi_plain $$m > scen.out 2>&1 || { cat scen.out; exit 1; }; done; \
	echo "test-mpi: the same scenarios in one process (plain build, ASan+UBSan): passed"; \
	$(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 2 ./test_mpi fit out=straight.bin epochs=4 > fit.out; \
	$(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 2 ./test_mpi fit out=first.bin epochs=2 request_at=13 ckpt=mid.ckpt > fit.out; \
	$(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 2 ./test_mpi fit out=resumed.bin epochs=4 resume=mid.ckpt > fit.out; \
	cmp -s straight.bin resumed.bin || { echo "test-mpi: resume from the rank-0 checkpoint is not exact"; exit 1; }; \
	echo "test-mpi: checkpoint requested on rank 1 at step 13, written by rank 0, resumed by a new mpirun: exact"; \
	$(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 2 ./test_mpi fit out=auto.bin epochs=4 resume=auto ckpt=mid.ckpt > fit.out 2>&1; \
	cmp -s straight.bin auto.bin && grep -q "resume auto: resuming mid.ckpt (global step 13" fit.out || \
	  { cat fit.out; echo "test-mpi: resume=auto on 2 ranks did not resume mid.ckpt exactly"; exit 1; }; \
	echo "test-mpi: resume=auto on every rank: the same file (save_to, step 13), exact"; \
	for v in "2 fmt=csv dir=pw1" "2 fmt=jsonl interval=epoch dir=pw2 name=p-{rank}" "2 fmt=csv dir=pw3 name=p-{rank}" \
	    "2 fmt=safetensors interval=batch_and_epoch dir=pw4 name=p-{rank}" "3 fmt=safetensors dir=pw5 name=p-{rank}" \
	    "2 fmt=csv dir=pw6 name=p-{rank} foreign=1" "2 fmt=safetensors dir=pw7 name=p-{rank} foreign=0" \
	    "2 fmt=csv logs=1 name=p-{rank}" "2 fmt=csv logs=1 resume=1 name=p-{rank}"; do set -- $$v; w=$$1; shift; \
	  $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np $$w ./test_mpi pw "$$@" > scen.out 2>&1 \
	    || { cat scen.out; echo "test-mpi: prediction_writer on $$w ranks ($$*) failed"; exit 1; }; \
	  grep "^pw: " scen.out; \
	  case "$$*" in *"{rank}"*) ;; *) [ "$$(grep -c 'processes: rank 0 writes its share of the batches only' scen.out)" = 1 ] \
	    || { cat scen.out; echo "test-mpi: prediction_writer without {rank}: rank 0 did not say once that it writes its share only"; exit 1; };; esac; done; \
	echo "test-mpi: prediction_writer: rank 0 alone writes (said once), or with {rank} every rank its own files, each holding that rank's \
	predictions; in the run directory on every rank; a later process takes its files back on every rank; a file of someone else's \
	at one rank's path fails every rank before any batch, nothing written"; \
	rm -rf longdir; $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 2 ./test_mpi longdir > scen.out 2>&1 \
	  || { cat scen.out; echo "test-mpi: a run directory of 1,100 bytes did not reach every rank"; exit 1; }; grep "^longdir: " scen.out; \
	$(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 2 ./train_mpi | tail -n 1
	@echo "test-mpi: all passed"

# The compile matrix of tests/train.mk (tr_mx), with TRAIN_MPI in the implementation TU.
$(TR_MX)/mpi-c99.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,$(MPICC) -std=c99 -DTRAIN_MPI,gcc -std=c99,$(MPICC))
$(TR_MX)/mpi-cxxcompat.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,$(MPICC) -std=c99 -Wc++-compat -DTRAIN_MPI,gcc -std=c99 -Wc++-compat,$(MPICC))
$(TR_MX)/mpi-cxx11.ok: $(TR_MX_DEPS) | $(BUILD)
	$(call tr_mx,$@,$(MPICXX) -std=c++11 -x c++ -DTRAIN_MPI,g++ -std=c++11 -x c++,$(MPICXX))

test-mpi-compile: $(TR_MX)/mpi-c99.ok $(TR_MX)/mpi-cxxcompat.ok $(TR_MX)/mpi-cxx11.ok
	@echo "test-mpi-compile: TRAIN_MPI builds warning-free as C99 (also -Wc++-compat) and C++11 and runs as one process"

# With TRAIN_CUDA too: device gradients through NCCL. Compiled and linked wherever nvcc, nccl.h and
# train.h's CUDA section (examples/cuda_mlp.cu) are present: the spirals MLP's .cu file with TRAIN_MPI,
# linked with tests/test_cuda.c, -lmpi and -lnccl, then run under mpirun -np 1 (it trains on a GPU when
# there is one, else says it skipped). Multi-rank NCCL needs one GPU per rank: not run here.
MPI_NVCC     = $(or $(NVCC),nvcc)
MPI_CU_HOME  = $(or $(CUDA_HOME),/usr/local/cuda)
MPI_CU_FLAGS = -O3 -std=c++14 -fmad=false -arch=sm_90 -I. $(STB_SYSINC) $(addprefix -I,$(shell $(MPICC) --showme:incdirs 2>/dev/null)) \
               -Xcompiler -Wall,-Wextra,-Werror
.PHONY: test-mpi-nccl
TEST_TARGETS += test-mpi-nccl
test-mpi-nccl: | $(MPI_DIR)
	@if [ ! -f examples/cuda_mlp.cu ] || [ ! -f tests/test_cuda.c ]; then echo "test-mpi-nccl: skipped: train.h's CUDA section is not in this tree"; \
	elif ! command -v $(MPI_NVCC) >/dev/null || [ ! -f $(MPI_CU_HOME)/include/nccl.h ]; then echo "test-mpi-nccl: skipped: nvcc or nccl.h not found"; \
	else set -e; \
	  $(MPI_NVCC) $(MPI_CU_FLAGS) -DTRAIN_MPI -c examples/cuda_mlp.cu -o $(MPI_DIR)/cuda_mlp_mpi.o; \
	  $(CC) $(ALL_CFLAGS) tests/test_cuda.c $(MPI_DIR)/cuda_mlp_mpi.o -o $(MPI_DIR)/test_cuda_mpi -L$(MPI_CU_HOME)/lib64 \
	    -Wl,-rpath,$(MPI_CU_HOME)/lib64 -lcudart -lnccl -lstdc++ -lm $$($(MPICC) --showme:link); \
	  $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --oversubscribe -np 1 $(MPI_DIR)/test_cuda_mpi; \
	  echo "test-mpi-nccl: TRAIN_MPI + TRAIN_CUDA (NCCL) built warning-free with nvcc and linked with MPI and NCCL"; fi

# More ranks than the host has cores (--oversubscribe): rank 0 warns once, naming the fix; with
# mpi_yield_when_idle set, or with no more ranks than cores, nothing is said.
test-mpi-cores: $(MPI_DIR)/train_mpi
	@set -e; cd $(MPI_DIR); n=$$(nproc); \
	$(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) -np $$((n + 1)) ./train_mpi > cores_over.txt 2>&1; \
	[ "$$(grep -c 'ranks share a host that has' cores_over.txt)" = 1 ] || { cat cores_over.txt; echo "test-mpi-cores: $$((n + 1)) ranks on $$n cores: not one warning"; exit 1; }; \
	grep -q "^train.h: $$((n + 1)) ranks share a host that has $$n cores: .*--mca mpi_yield_when_idle 1" cores_over.txt; \
	$(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) --mca mpi_yield_when_idle 1 -np $$((n + 1)) ./train_mpi > cores_yield.txt 2>&1; \
	! grep -q 'ranks share a host' cores_yield.txt || { echo "test-mpi-cores: warned with mpi_yield_when_idle 1"; exit 1; }; \
	m=$$((n < 2 ? 1 : 2)); $(MPI_ENV) timeout $(MPI_TIMEOUT) $(MPIRUN) -np $$m ./train_mpi > cores_fit.txt 2>&1; \
	! grep -q 'ranks share a host' cores_fit.txt || { echo "test-mpi-cores: warned with $$m ranks on $$n cores"; exit 1; }; \
	echo "test-mpi-cores: $$((n + 1)) ranks on $$n cores: one warning from rank 0; none with mpi_yield_when_idle 1 or $$m ranks"
