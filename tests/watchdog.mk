# tests/watchdog.mk - the watchdog callback (tests/test_watchdog.c): plain, ASan+UBSan and valgrind (a sleeping
# hook reported with its event, name and step; action=exit's status and whole csv lines; no report and a joined
# thread when nothing hangs; bad parameters), and under mpirun -np 2 with one rank stuck (test-watchdog-mpi:
# both ranks report, the waiting one in a collective; with action=exit the job ends non-zero instead of hanging).
$(eval $(call cmocka_suite,watchdog,watchdog,tests/one.h hooks.h train.h))
$(BUILD)/test_watchdog $(BUILD)/test_watchdog_asan: LDLIBS += -pthread
test-watchdog-valgrind: VALGRIND += --child-silent-after-fork=yes # test_exit forks a child
.PHONY: test-watchdog-mpi
TEST_TARGETS += test-watchdog-mpi

# ThreadSanitizer: the loop's thread and the watchdog's share only the snapshot (atomics) and, on purpose, the
# look at hooks.h's dispatch state that tests/tsan.supp names; any other race fails the test.
WD_TSAN := $(BUILD)/test_watchdog_tsan
.PHONY: test-watchdog-tsan
test-watchdog: test-watchdog-tsan
$(WD_TSAN): tests/test_watchdog.c tests/test.h tests/one.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -O1 -fsanitize=thread -o $@ tests/test_watchdog.c -lcmocka $(LDLIBS) -pthread
test-watchdog-tsan: $(WD_TSAN)
	TSAN_OPTIONS="halt_on_error=1 suppressions=tests/tsan.supp" ./$(WD_TSAN)

# mpicc -DTRAIN_MPI; every mpirun under timeout (a hang fails the test). MPI_ENV, MPIRUN: tests/mpi.mk.
$(BUILD)/mpi/wd_mpi: tests/watchdog_mpi.c tests/one.h hooks.h train.h | $(BUILD)
	@mkdir -p $(BUILD)/mpi
	@command -v $(MPICC) >/dev/null || { echo "test-watchdog-mpi: $(MPICC) not found: install openmpi-bin libopenmpi-dev (sh scripts/deps.sh)"; exit 1; }
	$(MPICC) $(TEST_CFLAGS) -DTRAIN_MPI -o $@ tests/watchdog_mpi.c $(LDLIBS) -pthread
test-watchdog-mpi: $(BUILD)/mpi/wd_mpi
	@MPI_ENV="$(MPI_ENV)" MPIRUN="$(MPIRUN)" sh tests/watchdog_mpi.sh $(BUILD)/mpi/wd_mpi

# The watchdog's cost a step in the loop's thread (callgrind, exact; about 30 s): not registered, registered, in a
# loop of your own and in tr_fit (docs/callbacks.md quotes the numbers).
.PHONY: watchdog-cost
$(BUILD)/watchdog_cost: tests/watchdog_cost.c tests/cost.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -o $@ tests/watchdog_cost.c $(LDLIBS) -pthread
watchdog-cost: $(BUILD)/watchdog_cost
	./$(BUILD)/watchdog_cost
