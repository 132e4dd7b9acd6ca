#!/usr/bin/env bash
# The Triton backend's checks on the GPU machine, in one call of the device tool (see ../shared/GPU.md):
#
#   run(command="bash scripts/gpu_triton.sh", timeout_s=600)
#
# The image has torch (CUDA), triton 3.6, numpy, pluggy and pytest, so nothing has to travel. Steps, each under a
# timeout, everything also written to $OUT/log (the bench's figures to $OUT/bench_triton.json):
#  1. install the project and plugins/triton with --no-deps
#  2. nvidia-smi, the device list, a smoke test (elementwise, reduce, half matmul against numpy, real launches)
#  3. plugins/triton/tests and the conformance suite with real launches (DEVICE=TRITON)
#  4. the GPU benchmark: uopkit TRITON against PyTorch on the same GPU, same shapes (bench/gpu.py)
# A failing step is logged and the next one still runs; the exit code is the number of failed steps.
# GPU_TRITON_STEPS picks steps by name, e.g. GPU_TRITON_STEPS="install smoke bench".
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu_triton_out}"
mkdir -p "$OUT"
LOG="$OUT/log"
: > "$LOG"
# kernel sources and Triton's binaries stay on the machine: only the log and the JSON come back
export PYTHONUNBUFFERED=1 UOPKIT_CACHE_DIR=/tmp/uopkit_triton_cache TRITON_CACHE_DIR=/tmp/triton_cache SPEC=1
unset TRITON_INTERPRET
failed=0 BUDGET=""
STEPS="${GPU_TRITON_STEPS:-install driver devices smoke plugin-tests conformance bench}"

source scripts/gpu_steps.sh

step install 120 python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . -e plugins/triton
step driver 30 nvidia-smi
step devices 60 python3 -c "import sys; from uopkit.cli import main; sys.exit(main(['devices', '-v']))"
step smoke 120 python3 - <<'PY'
import numpy as np
import triton
from uopkit import Device, Tensor
dev = Device["TRITON"]
print(dev, "triton", triton.__version__, "targets", dev.compiler.targets)
assert dev.gpu, "TRITON did not find the GPU"
rng = np.random.default_rng(0)
a = rng.standard_normal((300, 257)).astype(np.float32)
np.testing.assert_allclose((Tensor(a, device="TRITON") * 2 + 1).numpy(), a * 2 + 1, rtol=1e-6)
np.testing.assert_allclose(Tensor(a, device="TRITON").sum(1).numpy(), a.sum(1), rtol=1e-4, atol=1e-4)
h, w = rng.standard_normal((128, 64)).astype(np.float16), rng.standard_normal((64, 32)).astype(np.float16)
got = (Tensor(h, device="TRITON") @ Tensor(w, device="TRITON")).float().numpy()
np.testing.assert_allclose(got, h.astype(np.float32) @ w.astype(np.float32), rtol=2e-2, atol=2e-2)
print("smoke OK")
PY
step plugin-tests 240 python3 -m pytest -q -p no:cacheprovider plugins/triton/tests
step conformance 300 python3 -m pytest -q -p no:cacheprovider -rs --pyargs uopkit.testing --uopkit-device=TRITON
step bench 400 python3 -m bench.gpu --device TRITON --json "$OUT/bench_triton.json"

echo "=== done: $failed failed step(s)" | tee -a "$LOG"
exit "$failed"
