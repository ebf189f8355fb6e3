# tests/multihost.mk - train.h's MPI strategy across two hosts (included by the top Makefile).
#
#   make test-mpi-multihost   two network namespaces joined by a veth pair are two hosts, two ranks on
#                             each, Open MPI over TCP through a launch agent that is not ssh
#                             (tests/multihost.sh): bit-identical to four ranks on one host; kill -9 of
#                             a rank ends every rank within seconds; the link down for 10 s stalls the
#                             run, which then ends with the same bits; SIGINT to mpirun ends every rank
#                             through on_exception at the same step. Needs root and network namespaces
#                             (else one line says it skipped). About 25 s, mostly waiting (the outage).
.PHONY: test-mpi-multihost
TEST_TARGETS += test-mpi-multihost
test-mpi-multihost: $(MPI_DIR)/test_mpi tests/multihost.sh
	@MPI_TIMEOUT=$(MPI_TIMEOUT) sh tests/multihost.sh $(MPI_DIR)/test_mpi
