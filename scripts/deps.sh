#!/bin/sh
# Installs what a make target needs, only when something is missing.
#   sh scripts/deps.sh demo   what `make demo` needs: a C compiler and stb_ds.h (libstb-dev)
#   sh scripts/deps.sh quick  what `make test-quick` needs: the above, cmocka, clang with its sanitizer
#                             runtimes (libclang-rt-dev)
#   sh scripts/deps.sh        what `make test` and `make bench` need: the above, valgrind,
#                             clang with libFuzzer (libclang-rt-dev), g++, pkg-config, Open MPI (mpicc, mpirun),
#                             iproute2 (ip netns: test-mpi-multihost's two hosts),
#                             and for the logging tests python3 + python3-venv, tmux, rsvg-convert (librsvg2-bin),
#                             libcurl (libcurl4-openssl-dev: the mlflow logger);
#                             as root, Slurm for test-slurm (munge slurmctld slurmd slurm-client)
missing=""
command -v cc >/dev/null 2>&1         || missing="$missing gcc"
command -v make >/dev/null 2>&1       || missing="$missing make"
[ -f /usr/include/stb/stb_ds.h ]      || missing="$missing libstb-dev"
if [ "${1:-test}" != demo ]; then
  [ -f /usr/include/cmocka.h ]          || missing="$missing libcmocka-dev"
  command -v clang >/dev/null 2>&1      || missing="$missing clang"
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.asan-x86_64.a >/dev/null 2>&1 || missing="$missing libclang-rt-dev"
fi
if [ "${1:-test}" = test ]; then
  command -v valgrind >/dev/null 2>&1   || missing="$missing valgrind"
  command -v g++ >/dev/null 2>&1        || missing="$missing g++"
  command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
  command -v mpirun >/dev/null 2>&1     || missing="$missing openmpi-bin"
  command -v mpicc >/dev/null 2>&1      || missing="$missing libopenmpi-dev"
  command -v ip >/dev/null 2>&1         || missing="$missing iproute2" # the two-host test's namespaces
  case "$missing" in *libclang-rt-dev*) ;; *)
    ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || missing="$missing libclang-rt-dev" ;; esac
  # the logging tests: TensorBoard read back in a venv, the live bar in tmux, the plot rendered
  command -v python3 >/dev/null 2>&1    || missing="$missing python3"
  python3 -c 'import ensurepip' >/dev/null 2>&1 || missing="$missing python3-venv"
  command -v tmux >/dev/null 2>&1       || missing="$missing tmux"
  command -v rsvg-convert >/dev/null 2>&1 || missing="$missing librsvg2-bin"
  command -v curl-config >/dev/null 2>&1  || missing="$missing libcurl4-openssl-dev" # the mlflow logger (TRAIN_MLFLOW)
  # test-slurm: a single-node Slurm cluster of its own (as root; the packages' services are not started)
  if [ "$(id -u)" = 0 ]; then
    command -v munged >/dev/null 2>&1    || missing="$missing munge"
    command -v slurmctld >/dev/null 2>&1 || missing="$missing slurmctld"
    command -v slurmd >/dev/null 2>&1    || missing="$missing slurmd"
    command -v sbatch >/dev/null 2>&1    || missing="$missing slurm-client"
  fi
fi
[ -z "$missing" ] && exit 0
echo "deps: installing:$missing"
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo
  else
    echo "deps: missing packages:$missing" >&2
    echo "deps: run as root, or:  sudo apt-get install$missing" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# Slurm's and munge's packages would start their services: the tests run daemons of their own instead
norc=
case "$missing" in *slurm*|*munge*) [ "$(id -u)" = 0 ] && [ ! -e /usr/sbin/policy-rc.d ] &&
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && norc=1 ;; esac
$SUDO apt-get update -qq && $SUDO apt-get install -y -qq $missing >/dev/null
rc=$?
[ -n "$norc" ] && rm -f /usr/sbin/policy-rc.d
[ $rc = 0 ] || { echo "deps: apt-get install$missing failed" >&2; exit 1; }
