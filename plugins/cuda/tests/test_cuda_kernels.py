"""Every kernel the conformance suite and the Tensor test suite generate for CUDA compiles with NVRTC, for sm_80 and
sm_90, without errors or warnings.

No GPU is needed: the suites run on the emulator with ``EMULATE=CUDA`` (so the core builds the programs a CUDA
device gets: locals, shared memory, tensor cores) and the `cuda_capture` plugin saves each one rendered as CUDA C.
CI runs the capture once; UOPKIT_CUDA_KERNELS=<folder> reuses a folder captured before.

Kernels are compiled in batches (the kernels that share a preamble, renamed apart, in one translation unit): NVRTC
spends most of its time per call, not per kernel. A failing batch is compiled kernel by kernel to name the culprit.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from uopkit.device import CompileError
from uopkit_cuda.compiler import NVRTCCompiler, nvrtc_problem

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[2]
ARCHS = ("sm_80", "sm_90")
KERNEL_LINE = re.compile(r'^extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', re.M)

pytestmark = pytest.mark.skipif(nvrtc_problem() is not None, reason=f"NVRTC unusable here: {nvrtc_problem()}")


def capture(folder: pathlib.Path) -> None:
    """Run the conformance suite and the Tensor suites on EMULATOR with EMULATE=CUDA, saving every kernel."""
    env = dict(os.environ, EMULATE="CUDA", DEVICE="EMULATOR", UOPKIT_CUDA_CAPTURE=str(folder))
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    # a compile cache of its own, beside the kernels (the emulator's "binaries" are not wanted elsewhere)
    env["UOPKIT_CACHE_DIR"] = str(folder.parent / f"{folder.name}_cache")
    runs = [
        ["--pyargs", "uopkit.testing", "--uopkit-device=EMULATOR"],
        [str(ROOT / "tests" / "test_tensor.py"), str(ROOT / "tests" / "test_tensor_ops.py")],
    ]
    for args in runs:
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "cuda_capture", "-p", "no:cacheprovider", *args]
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{' '.join(args)} failed on EMULATE=CUDA:\n{done.stdout[-4000:]}{done.stderr}"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder_name = os.environ.get("UOPKIT_CUDA_KERNELS")
    folder = pathlib.Path(folder_name) if folder_name else tmp_path_factory.mktemp("cuda_kernels")
    if not folder_name:
        capture(folder)
    errors = sorted(folder.glob("*.err"))
    assert not errors, "the CUDA renderer rejected kernels:\n" + "\n\n".join(p.read_text() for p in errors[:5])
    found = {p.name: p.read_text() for p in sorted(folder.glob("*.cu"))}
    assert found, f"no kernels captured in {folder}"
    return found


def batches(kernels: dict[str, str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """(preamble, [(file, kernel with a unique name)]) for each distinct preamble. A kernel whose code (its name
    aside) was seen already is left out: compiling it again checks nothing new (about a third of the captured
    kernels are such repeats: tests build the same kernel, named apart by a counter, `E_9` and `E_9n1`)."""
    grouped: dict[str, list[tuple[str, str]]] = {}
    seen: set[tuple[str, str]] = set()
    for i, (file, src) in enumerate(kernels.items()):
        match = KERNEL_LINE.search(src)
        assert match is not None, f"{file}: no kernel signature in\n{src}"
        preamble, kernel = src[: match.start()], src[match.start() :]
        code = (preamble, src[match.end() :])
        if code in seen:
            continue
        seen.add(code)
        renamed = kernel.replace(f" {match.group(1)}(", f" k{i}_{match.group(1)}(", 1)
        grouped.setdefault(preamble, []).append((file, renamed))
    return list(grouped.items())


@pytest.mark.parametrize("arch", ARCHS)
def test_every_generated_kernel_compiles(kernels: dict[str, str], arch: str) -> None:
    compiler = NVRTCCompiler(arch, warnings_as_errors=True)
    failures: list[str] = []
    for preamble, group in batches(kernels):
        try:
            compiler.compile(preamble + "\n".join(k for _, k in group))
        except CompileError:
            for file, kernel in group:
                try:
                    compiler.compile(preamble + kernel)
                except CompileError as e:
                    failures.append(f"{file}: {e}")
    assert not failures, f"{len(failures)} of {len(kernels)} kernels fail for {arch}:\n" + "\n\n".join(failures[:3])


def test_capture_saw_tensor_cores_and_shared_memory(kernels: dict[str, str]) -> None:
    """The suites reach CUDA's special paths, so the compile test above covers them."""
    sources = "\n".join(kernels.values())
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in sources
    assert "__shared__" in sources and "__syncthreads();" in sources
    assert "threadIdx.x" in sources and "blockIdx.x" in sources
