# hooks.h benchmark: one table of instructions (callgrind) and ns (clock) per hook site.
#   make bench              (all benches)     make bench-hooks    (this one)
# Built with $(CC) and $(ALL_CFLAGS); try  make bench-hooks CC=clang  to compare compilers.
BENCH_DIR  := $(BUILD)/bench
# -gdwarf-4: valgrind 3.19 cannot read the DWARF 5 that clang 14 writes (make bench-hooks CC=clang)
BENCH_CFLAGS = $(ALL_CFLAGS) -gdwarf-4
BENCH_DEPS := hooks.h bench/bench.h
BENCH_OBJS := $(BENCH_DIR)/bench_hooks.o $(BENCH_DIR)/bench_body.o $(BENCH_DIR)/site_nosite.o \
              $(BENCH_DIR)/site_off.o $(BENCH_DIR)/site_site.o $(BENCH_DIR)/site_direct.o $(BENCH_DIR)/site_fnptr.o

.PHONY: bench-hooks
BENCH_TARGETS += bench-hooks
BENCH_BINS += bench_hooks

bench-hooks: $(BUILD)/bench_hooks
	@echo "CC=$(CC) CFLAGS=$(CFLAGS)"
	@if command -v taskset >/dev/null 2>&1; then taskset -c 1 $(BUILD)/bench_hooks; else $(BUILD)/bench_hooks; fi

$(BENCH_DIR):
	@mkdir -p $(BENCH_DIR)

$(BUILD)/bench_hooks: $(BENCH_OBJS)
	$(CC) $(BENCH_CFLAGS) $(BENCH_OBJS) -o $@ $(LDLIBS)

$(BENCH_DIR)/bench_hooks.o: bench/bench_hooks.c $(BENCH_DEPS) | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -c $< -o $@
$(BENCH_DIR)/bench_body.o: bench/bench_body.c $(BENCH_DEPS) | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -c $< -o $@
$(BENCH_DIR)/site_nosite.o: bench/bench_site.c $(BENCH_DEPS) | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -DBENCH_STEP=bench_step_nosite -DBENCH_KIND=0 -c $< -o $@
$(BENCH_DIR)/site_off.o: bench/bench_site.c $(BENCH_DEPS) | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -DBENCH_STEP=bench_step_off -DBENCH_KIND=1 -DHK_DISABLE -c $< -o $@
$(BENCH_DIR)/site_site.o: bench/bench_site.c $(BENCH_DEPS) | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -DBENCH_STEP=bench_step_site -DBENCH_KIND=1 -c $< -o $@
$(BENCH_DIR)/site_direct.o: bench/bench_site.c $(BENCH_DEPS) | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -DBENCH_STEP=bench_step_direct -DBENCH_KIND=2 -c $< -o $@
$(BENCH_DIR)/site_fnptr.o: bench/bench_site.c $(BENCH_DEPS) | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -DBENCH_STEP=bench_step_fnptr -DBENCH_KIND=3 -c $< -o $@
