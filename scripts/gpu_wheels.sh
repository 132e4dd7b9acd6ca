#!/usr/bin/env bash
# Run HERE (a machine with internet), once, before a GPU session: puts what scripts/gpu_check.sh installs on the
# GPU machine (which can't download) into .whl/, a git-ignored folder the run carries (`carry: [".whl"]`).
# The GPU image already has torch, numpy, pluggy, pytest, cuda-bindings and nvidia-cuda-nvrtc, and CUDA's headers
# in /usr/local/cuda/include; pycuda is missing and builds there from its sdist against CUDA 13.0.
set -euo pipefail
cd "$(dirname "$0")/.."
# .whl/ is in .gitignore, so the device tool carries it only when asked (`carry: [".whl"]`)
mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl pytools platformdirs siphash24 mako markupsafe typing_extensions wheel
# pycuda has no wheels: its source, built on the GPU machine by gpu_check.sh
python3 -m pip download --no-deps --no-binary=:all: --no-build-isolation -d .whl pycuda
ls -la .whl
