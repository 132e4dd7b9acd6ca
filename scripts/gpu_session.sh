#!/usr/bin/env bash
# Everything one device lease should measure, in one call of the device tool (see ../shared/GPU.md):
#
#   scripts/gpu_wheels.sh, or just pyopencl's wheels (GPU.md)   # here, once: what the GPU image lacks, into .whl/
#   run(command="bash scripts/gpu_session.sh", carry=[".whl"], timeout_s=600)
#
# Steps, most wanted first, each under a timeout cut to what is left of GPU_SESSION_SECONDS (default 560) so the
# call ends inside its limit; a step with under 20 s left is skipped. Output goes to $OUT/log, figures to $OUT/*.json:
#  1. install the project and every in-tree plugin with --no-deps, pyopencl from .whl; NVIDIA's OpenCL ICD
#  2. the machine: GPU, cores and affinity, uopkit's devices
#  3. bench.gpu on CUDA against PyTorch on the same GPU (checks each output against PyTorch's first)
#  4. the CPU bench on all cores (numpy, torch, uopkit in one process) and the cold main job, 3 fresh-cache runs
#  5. bench.gpu on TRITON and OPENCL
#  6. the conformance suite on CUDA, TRITON and OPENCL (pytest-xdist is on the image)
# A failing step is logged and the next one still runs; the exit code is the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu_session_out}"
mkdir -p "$OUT"
LOG="$OUT/log"
: > "$LOG"
# caches stay on the machine: only the log and the JSON files come back (the tool returns 8 files at most)
export PYTHONUNBUFFERED=1 UOPKIT_CACHE_DIR=/tmp/uopkit_cache TRITON_CACHE_DIR=/tmp/triton_cache
unset TRITON_INTERPRET DEVICE
BUDGET="${GPU_SESSION_SECONDS:-560}" STEPS=""
failed=0

source scripts/gpu_steps.sh

wheels=()
for w in .whl/*.whl; do [ -e "$w" ] && wheels+=("$w"); done
echo "=== commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" | tee -a "$LOG"
step install 90 python3 -m pip install -q --no-index --no-deps --no-build-isolation "${wheels[@]}" \
  -e . -e plugins/cpu -e plugins/cuda -e plugins/opencl -e plugins/triton
if [ -e /usr/local/nvidia/lib64/libnvidia-opencl.so ]; then
  mkdir -p /tmp/vendors && echo /usr/local/nvidia/lib64/libnvidia-opencl.so > /tmp/vendors/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/vendors
fi
step machine 40 bash -c 'nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv;
  nproc; python3 -c "import os, platform; print(\"cpu_count\", os.cpu_count(), \"affinity\", len(os.sched_getaffinity(0)), platform.python_version())";
  grep -m1 "model name" /proc/cpuinfo; python3 -m pip list 2>/dev/null | grep -i -E "^(torch|triton|numpy|cuda-bindings|pyopencl|pluggy) ";
  python3 -c "import sys; from uopkit.cli import main; sys.exit(main([\"devices\", \"-v\"]))"'
step gpu-cuda 150 python3 -m bench.gpu --device CUDA --rounds 3 --json "$OUT/gpu_cuda.json"
# -v prints each timing as it is measured: the log keeps them if the step runs out of time
step cpu-bench 170 env DEVICE=CPU python3 -m bench -v --rounds 3 --budget 0.4 --json "$OUT/cpu_bench.json"
step main-job-cold 75 env DEVICE=CPU python3 -m bench.cold --main-job --repeat 3
xdist=()
python3 -c "import xdist" 2>/dev/null && xdist=(-n 8)
conformance() {  # conformance DEVICE SECONDS
  step "conformance-$1" "$2" python3 -m pytest -q -p no:cacheprovider "${xdist[@]}" -rs --pyargs uopkit.testing \
    --uopkit-device="$1"
}
conformance CUDA 90
step gpu-triton 90 python3 -m bench.gpu --device TRITON --rounds 3 --json "$OUT/gpu_triton.json"
step gpu-opencl 75 python3 -m bench.gpu --device OPENCL --rounds 3 --json "$OUT/gpu_opencl.json"
conformance TRITON 90
conformance OPENCL 90
echo "=== done at t=${SECONDS}s: $failed step(s) failed" | tee -a "$LOG"
exit "$failed"
