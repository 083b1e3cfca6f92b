#!/usr/bin/env bash
# On the GPU machine: Nsight Compute's detailed sections for one launch of one kernel in an
# engine's execution (a `kiln run`: interpreted, so every layer is its own launch), to see what
# bounds it: throughput by unit, warp stall reasons (sampled), shared-memory wavefronts and bank
# conflicts per instruction kind. Nsight locks the SM clock at base (1.35 GHz on the H200), so
# durations are about 1.35x the boost clock's.
#   bash benches/gpu/nsight_kernel.sh ENGINE INPUTS.npz KERNEL_REGEX [SKIP] [NAME]
# SKIP: matching launches to pass over first (0: the first). Output: $OUT/nsight_NAME.txt. With
# SASS=1 also $OUT/nsight_NAME.sass.csv: every SASS instruction of the kernel with how often warps
# executed it (where an instruction-bound kernel's instructions go).
set -u
engine=$1 inputs=$2 kernel=$3 skip=${4:-0} name=${5:-kernel}
source "$(dirname "$0")/env.sh"
sections=(SpeedOfLight ComputeWorkloadAnalysis MemoryWorkloadAnalysis MemoryWorkloadAnalysis_Tables SchedulerStats WarpStateStats SourceCounters Occupancy LaunchStats)
args=()
for s in "${sections[@]}"; do args+=(--section "$s"); done
report=()
[ "${SASS:-0}" = 1 ] && report=(-o "/tmp/nsight_$name" -f)
/usr/local/cuda/bin/ncu "${args[@]}" "${report[@]}" --print-details all -k "regex:$kernel" --launch-skip "$skip" --launch-count 1 \
  .gpu/bin/kiln run "$engine" --inputs "$inputs" > "${OUT:-/tmp}/nsight_$name.txt" 2>&1
rc=$?
if [ "${SASS:-0}" = 1 ]; then
  /usr/local/cuda/bin/ncu -i "/tmp/nsight_$name.ncu-rep" --page source --print-source sass --csv > "${OUT:-/tmp}/nsight_$name.sass.csv" 2>&1
  # A run writing a report prints no sections: they come from the report.
  /usr/local/cuda/bin/ncu -i "/tmp/nsight_$name.ncu-rep" --print-details all >> "${OUT:-/tmp}/nsight_$name.txt" 2>&1
fi
echo "nsight $name: exit $rc, $(wc -l < "${OUT:-/tmp}/nsight_$name.txt") lines in ${OUT:-/tmp}/nsight_$name.txt"
