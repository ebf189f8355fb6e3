#!/bin/sh
# tests/multihost.sh TEST_MPI - train.h's MPI strategy on two hosts (make test-mpi-multihost).
#
# Two network namespaces joined by a veth pair are the two hosts (each with its own host name, a UTS
# namespace: Open MPI 4.1 crashes in MPI_Comm_split_type when two hosts share one). Open MPI starts
# the second host's daemon through a launch agent that is not ssh (plm_rsh_agent: a script that runs
# `ip netns exec` for the host it is given) and talks TCP over the veth only (btl tcp,self; oob too).
# Two ranks on each host, tests/test_mpi.c's fit (spirals MLP, AdamW, 20 epochs, 80 steps):
#   same   the parameters are bit-identical to four ranks on one host (shared memory); every
#          connection between the hosts uses the pinned ports (what a firewall would let through)
#   kill   kill -9 of a rank on the second host ends every rank within seconds
#   link   the veth down for 10 s mid-run: the run stalls, then finishes with the same bits
#   int    SIGINT to mpirun (Ctrl-C): every rank ends through on_exception at the same step
# Every mpirun runs under `timeout`; the namespaces (and anything left in them) are removed on any
# exit. Names carry this shell's PID, so parallel runs do not collide. Without root or network
# namespaces it says so in one line and passes. The ranks run at nice 19: waiting Open MPI ranks
# busy-poll (through the 10 s outage too), and make test's other targets come first.
set -u
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
T=${MPI_TIMEOUT:-60}
say() { echo "test-mpi-multihost: $*"; }
skip() { say "skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (it makes network namespaces and a veth pair)"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
command -v unshare >/dev/null 2>&1 || skip "no unshare command (util-linux)"

P=mh$$
A=${P}a
B=${P}b
W=$(mktemp -d "${TMPDIR:-/tmp}/$P.XXXXXX")
cleanup() {
  for ns in $A $B; do
    for pid in $(ip netns pids $ns 2>/dev/null); do kill -9 $pid 2>/dev/null; done
    ip netns del $ns 2>/dev/null
  done
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
fail() { say "FAILED: $*"; [ -f "$W/out" ] && tail -n 30 "$W/out"; exit 1; }

ip netns add $A 2>/dev/null && ip netns add $B 2>/dev/null || skip "cannot make network namespaces here (ip netns add failed)"
ip netns exec $A unshare --uts true 2>/dev/null || skip "cannot enter a network namespace with a host name of its own (ip netns exec, unshare --uts)"
ip link add ${P}x type veth peer name ${P}y 2>/dev/null || skip "cannot make a veth pair here"
ip link set ${P}x netns $A name mh0 && ip link set ${P}y netns $B name mh0 &&
ip -n $A addr add 10.23.0.1/24 dev mh0 && ip -n $B addr add 10.23.0.2/24 dev mh0 &&
ip -n $A link set lo up && ip -n $B link set lo up && ip -n $A link set mh0 up && ip -n $B link set mh0 up ||
  fail "setting up the veth pair"

# The launch agent: Open MPI runs `agent HOST COMMAND...` to start its daemon on HOST (as it would
# `ssh HOST COMMAND...`); the host's namespace runs it, under the host's own name.
cat > "$W/agent" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  10.23.0.1) ns=$A ;;
  10.23.0.2) ns=$B ;;
  *) echo "agent: no host \$host" >&2; exit 1 ;;
esac
exec ip netns exec \$ns unshare --uts sh -c "hostname \$ns && \$*"
EOF
chmod +x "$W/agent"
printf '10.23.0.1 slots=2\n10.23.0.2 slots=2\n' > "$W/hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_orte_tmpdir_base="$W/ompi" # (a base of its own: tests/mpi.mk)
MH="--hostfile $W/hosts -np 4 --mca plm_rsh_agent $W/agent --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include mh0"
MH="$MH --mca oob_tcp_if_include mh0 --mca mpi_yield_when_idle 1"
# the ports pinned, as behind a firewall: the ranks listen from 50000 (16 ports), the daemons in 50100-50115
MH="$MH --mca btl_tcp_port_min_v4 50000 --mca btl_tcp_port_range_v4 16 --mca oob_tcp_dynamic_ipv4_ports 50100-50115"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# mpirun on the first host, in the background; its PID in $W/mpirun.pid, the job's in $job
start() {
  rm -f "$W/mpirun.pid"
  timeout $T nice -n 19 ip netns exec $A unshare --uts sh -c "hostname $A && echo \$\$ > $W/mpirun.pid && cd $W && exec mpirun $MH $BIN $*" \
    > "$W/out" 2>&1 &
  job=$!
}
# wait until every rank trains (each writes DIR/pid.RANK at step 1)
training() {
  i=0
  while [ $i -lt 400 ]; do
    [ -f $1/pid.0 ] && [ -f $1/pid.1 ] && [ -f $1/pid.2 ] && [ -f $1/pid.3 ] && [ -f "$W/mpirun.pid" ] && return 0
    kill -0 $job 2>/dev/null || fail "the job ended before training"
    sleep 0.05; i=$((i + 1))
  done
  fail "the ranks did not start training within 20 s"
}
# seconds until every rank's process is gone (at most 30)
gone() {
  t0=$1; i=0
  while [ $i -lt 600 ]; do
    alive=0
    for r in 0 1 2 3; do kill -0 "$(cat $2/pid.$r)" 2>/dev/null && alive=$((alive + 1)); done
    [ $alive = 0 ] && { since $t0; return 0; }
    sleep 0.05; i=$((i + 1))
  done
  echo 99
}
within() { awk -v s="$1" -v lim="$2" 'BEGIN { exit !(s <= lim) }'; }

t_all=$(now)
# same: two hosts == one host, bit for bit
( cd "$W" && timeout $T nice -n 19 mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none -np 4 $BIN fit out=one.bin epochs=20 ) \
  > "$W/out" 2>&1 || fail "four ranks on one host"
start fit out=two.bin epochs=20
wait $job || fail "four ranks on two hosts (rc $?)"
cmp -s "$W/one.bin" "$W/two.bin" || fail "two hosts (2 + 2 ranks, TCP) differ from four ranks on one host"
say "2 hosts x 2 ranks over TCP (launch agent, not ssh): parameters bit-identical to 4 ranks on one host"

# kill: a rank of the second host killed with kill -9
mkdir "$W/k"
start fit out=k.bin epochs=400 pace=25 pids=$W/k
training "$W/k"
# every connection between the hosts goes to a pinned port (what a firewall between them must let through)
ip netns exec $B ss -Htn state established > "$W/conns" || fail "ss"
awk '$4 ~ /^10\.23\.0\./ { n++; split($3, l, ":"); split($4, p, ":");
       if (!(l[2] >= 50000 && l[2] < 50016 || l[2] >= 50100 && l[2] <= 50115 ||
             p[2] >= 50000 && p[2] < 50016 || p[2] >= 50100 && p[2] <= 50115)) { print "unpinned: " $0; bad = 1 } }
     END { exit bad || n < 3 }' "$W/conns" || { cat "$W/conns"; fail "a connection between the hosts outside the pinned ports"; }
t0=$(now)
kill -9 "$(cat $W/k/pid.3)"
wait $job && fail "the job succeeded although a rank was killed"
s=$(gone $t0 "$W/k")
within $s 15 || fail "ranks still ran $s s after kill -9 of rank 3"
say "the $(awk '$4 ~ /^10\.23\.0\./' "$W/conns" | wc -l) connections between the hosts all use the pinned ports (50000+, 50100-50115)"
say "kill -9 of rank 3 (second host): every rank gone $s s later, mpirun failed"

# link: the veth down for 10 s while the ranks train; the run stalls, then ends as without the outage
mkdir "$W/l"
start fit out=link.bin epochs=20 pace=25 pids=$W/l
training "$W/l"
t0=$(now)
ip -n $B link set mh0 down || fail "ip link set down"
sleep 10 & wait $! # (a wait: the cleanup trap runs at once on a signal)
kill -0 $job 2>/dev/null || { wait $job; fail "the job ended during the outage (rc $?): it should stall (80 steps take ~2 s)"; }
ip -n $B link set mh0 up || fail "ip link set up"
wait $job || fail "the run after the outage failed (rc $?)"
s=$(since $t0)
cmp -s "$W/one.bin" "$W/link.bin" || fail "the run through a 10 s outage ends with other parameters"
say "link down 10 s mid-run: stalled, finished $s s after the link went down, parameters bit-identical"

# int: Ctrl-C on mpirun
mkdir "$W/i"
start fit out=i.bin epochs=400 pace=25 pids=$W/i exc=$W/i
training "$W/i"
t0=$(now)
kill -INT "$(cat $W/mpirun.pid)"
wait $job && fail "the job succeeded although mpirun was interrupted"
s=$(gone $t0 "$W/i")
within $s 15 || fail "ranks still ran $s s after SIGINT to mpirun"
for r in 0 1 2 3; do [ -f $W/i/exc.$r ] || fail "rank $r did not run on_exception"; done
[ "$(cat $W/i/exc.* | sort -u | wc -l)" = 1 ] || { cat $W/i/exc.*; fail "the ranks ran on_exception at different steps"; }
grep -q "interrupted" $W/i/exc.0 || fail "on_exception's reason: $(cat $W/i/exc.0)"
say "SIGINT to mpirun: every rank through on_exception at step $(cut -d' ' -f1 $W/i/exc.0) ($(cut -d' ' -f2- $W/i/exc.0)), all gone $s s later"
say "all passed in $(since $t_all) s"
