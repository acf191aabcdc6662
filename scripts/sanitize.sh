#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and synccheck over scripts/kernel_battery.py on
# a CUDA machine; exit status 1 if any tool reports an error. Run from the repository root.
set -uo pipefail
status=0
for tool in memcheck racecheck synccheck; do
  echo "== $tool"
  # PyTorch's own kernels are checked too; --error-exitcode makes a report fail the run.
  compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 20 python scripts/kernel_battery.py "$@" 2>&1 | tail -n 25
  code=${PIPESTATUS[0]}
  echo "$tool exit status $code"
  [ "$code" -eq 0 ] || status=1
done
exit $status
