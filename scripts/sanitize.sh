#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and synccheck over scripts/kernel_battery.py on a
# CUDA machine: a run per tool, family and dtype, JOBS at a time (racecheck of the whole
# battery in one process did not finish in 10 minutes). A run checks mpslinalg's kernels
# only, whose names carry their dtype (lu_factor_small_float32_n8): instrumenting PyTorch's
# and cuBLAS's kernels as well made racecheck several times slower. Logs go to LOGS; the
# exit status is 1 if any run reports an error, fails or times out. From the repository root:
#   TOOLS=racecheck FAMILIES="lu qr" DTYPES=float32 JOBS=4 scripts/sanitize.sh
set -uo pipefail
export TIMEOUT=${TIMEOUT:-1800} LOGS=${LOGS:-sanitize-logs}
mkdir -p "$LOGS"

check() {  # tool family dtype name-filter
  BATTERY_FAMILIES=$2 BATTERY_DTYPES=$3 timeout "$TIMEOUT" compute-sanitizer --tool "$1" --kernel-name "kns=$4" \
    --error-exitcode 3 --print-limit 20 python scripts/kernel_battery.py > "$LOGS/$1-$2-${4//_/}.txt" 2>&1
  echo "$1 $2 ${4//_/}: exit status $?"
}
export -f check

for tool in ${TOOLS:-racecheck memcheck synccheck}; do
  for family in ${FAMILIES:-svd lu qr triangular inverse}; do
    for dtype in ${DTYPES:-float32 complex64 float64 complex128}; do echo "$tool $family $dtype _${dtype}_"; done
  done
  echo "$tool lu float32 _int32_"  # lu_permutation: the one kernel without a floating dtype
done | xargs -P "${JOBS:-4}" -L 1 bash -c 'check "$@"' _ | tee "$LOGS/summary.txt"
grep -h "SUMMARY" "$LOGS"/*-*.txt | sort | uniq -c
! grep -qv "exit status 0$" "$LOGS/summary.txt"
