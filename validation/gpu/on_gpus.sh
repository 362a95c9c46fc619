#!/usr/bin/env bash
# on_gpus.sh MAX MPIEXEC PROGRAM [args...]: runs an MPI test program with one rank
# per usable GPU, at most MAX ranks. `PROGRAM --gpus [args...]`, run first without
# MPI, prints how many GPUs are usable, or why none is (or too few for args) and
# exits 77, which this passes on (CTest: skipped). The launch environment (run as
# root, oversubscribe) comes from the test's ENVIRONMENT.
set -uo pipefail
max=$1 mpiexec=$2 prog=$3
shift 3
n=$("$prog" --gpus "$@")
rc=$?
if [ "$rc" = 77 ]; then
  echo "$n"
  exit 77
fi
if [ "$rc" != 0 ]; then
  echo "FAIL: $prog --gpus exited $rc: $n"
  exit 1
fi
np=$((n < max ? n : max))
echo "$n GPU(s) usable: $np rank(s)"
# a hang is a failure, never a stuck suite
exec timeout -k 10 240 "$mpiexec" -np "$np" "$prog" "$@"
