#!/usr/bin/env bash
# The CUDA backend's checks on the GPU machine, in one call of the device tool (see ../shared/GPU.md):
#
#   scripts/gpu_wheels.sh                       # here, once: pycuda's sdist and its pure-Python deps into .whl/
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=600)
#
# Steps, each under a timeout, everything also written to $OUT/log (JSON results to $OUT/):
#  1. install the project with --no-deps (the image has torch, numpy, pytest, cuda-bindings, nvidia-cuda-nvrtc)
#  2. the driver and the device list; a smoke test (half matmul on tensor cores against numpy)
#  3. plugins/cuda/tests, the conformance suite and the Tensor suite with DEVICE=CUDA (cuda-bindings runtime)
#  4. the GPU benchmark: uopkit CUDA against PyTorch on the same GPU (bench/gpu.py)
#  5. pycuda built from its sdist (when .whl has it), then the conformance and Tensor suites on UOPKIT_CUDA_RUNTIME=pycuda
# A failing step is logged and the next one still runs; the exit code is the number of failed steps.
# Budget: one call may run 600 s. Steps 1-4 are expected to take a few minutes; building pycuda (serial C++ with
# its bundled Boost.Python) may take most of a call: run it on its own, e.g.
#   GPU_CHECK_STEPS="install pycuda-build pycuda-conformance pycuda-tensor-suite" bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu_check_out}"
mkdir -p "$OUT"
LOG="$OUT/log"
: > "$LOG"
export PYTHONUNBUFFERED=1 UOPKIT_CACHE_DIR="$OUT/cache" SPEC=1
failed=0 BUDGET=""

# GPU_CHECK_STEPS picks steps by name (default: all but cuda-tests, which need no GPU and run in CI), e.g.
# GPU_CHECK_STEPS="install devices smoke conformance" to stay well inside one 600 s call
STEPS="${GPU_CHECK_STEPS:-install driver devices smoke conformance tensor-suite bench pycuda-build pycuda-conformance pycuda-tensor-suite}"

source scripts/gpu_steps.sh

wheels=()
for w in .whl/*.whl; do [ -e "$w" ] && wheels+=("$w"); done
step install 120 python3 -m pip install -q --no-index --no-deps --no-build-isolation "${wheels[@]}" \
  -e . -e plugins/cpu -e plugins/cuda
step driver 30 nvidia-smi
step devices 60 python3 -c "import sys; from uopkit.cli import main; sys.exit(main([\"devices\", \"-v\"]))"
step smoke 120 env DEVICE=CUDA python3 - <<'PY'
import numpy as np
from uopkit import Device, Tensor
from uopkit.engine.realize import method_cache
dev = Device["CUDA"]
print(dev, dev.caps)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((256, 128)).astype(np.float16), rng.standard_normal((128, 64)).astype(np.float16)
got = (Tensor(a) @ Tensor(b)).float().numpy()
np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2, atol=2e-2)
# (a compiled runner keeps no linear program: built again from each kernel's AST)
from uopkit.codegen import get_program
programs = [get_program(ast, Device[d].renderer) for (ast, d) in method_cache if d.startswith("CUDA")]
used = {u.arg.name for p in programs for u in p.uops if u.op.name == "WMMA"}
print("half matmul OK, tensor cores used:", used or "none")
PY
step cuda-tests 300 python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests
step conformance 300 python3 -m pytest -q -p no:cacheprovider --pyargs uopkit.testing --uopkit-device=CUDA
step tensor-suite 400 env DEVICE=CUDA python3 -m pytest -q -p no:cacheprovider tests/test_tensor.py tests/test_tensor_ops.py
step bench 400 python3 -m bench.gpu --device CUDA --json "$OUT/bench_gpu.json"

sdist=$(ls .whl/pycuda-*.tar.gz 2>/dev/null | head -1)
if [ -n "$sdist" ]; then
  export CUDA_ROOT=/usr/local/cuda PATH="/usr/local/cuda/bin:$PATH"
  step pycuda-build 400 python3 -m pip install -q --no-index --no-deps --no-build-isolation "$sdist"
  step pycuda-conformance 300 env UOPKIT_CUDA_RUNTIME=pycuda python3 -m pytest -q -p no:cacheprovider \
    --pyargs uopkit.testing --uopkit-device=CUDA
  step pycuda-tensor-suite 400 env UOPKIT_CUDA_RUNTIME=pycuda DEVICE=CUDA python3 -m pytest -q -p no:cacheprovider \
    tests/test_tensor.py tests/test_tensor_ops.py
else
  echo "=== pycuda: skipped, no .whl/pycuda-*.tar.gz (run scripts/gpu_wheels.sh here first)" | tee -a "$LOG"
fi
echo "=== done: $failed step(s) failed" | tee -a "$LOG"
exit "$failed"
