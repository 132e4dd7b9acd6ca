"""The suite's own fixtures (tests/conftest.py): a test's random inputs depend on its id only, not on which tests ran
before it in the process."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

RNG = np.random.default_rng(0)
LEGACY = np.random.RandomState(0)
PY_RNG = random.Random(0)
# a helper that holds the generator itself (a bound method taken at import) draws the reseeded stream too
_standard_normal = RNG.standard_normal


def _seed(request: pytest.FixtureRequest) -> int:
    return zlib.crc32(request.node.nodeid.encode())


@pytest.mark.parametrize("draws_before", [0, 1, 5])
def test_module_generators_start_from_the_tests_id(request, draws_before):
    # whatever this module's tests drew before (the other parameters draw 0, 1 or 5 values each, in any order), each
    # generator starts here where a fresh one seeded by this test's id starts
    seed = _seed(request)
    np.testing.assert_array_equal(RNG.standard_normal(4), np.random.default_rng(seed).standard_normal(4))
    np.testing.assert_array_equal(LEGACY.standard_normal(4), np.random.RandomState(seed).standard_normal(4))
    fresh = random.Random(seed)
    assert [PY_RNG.random() for _ in range(4)] == [fresh.random() for _ in range(4)]
    RNG.standard_normal(draws_before)
    LEGACY.standard_normal(draws_before)
    [PY_RNG.random() for _ in range(draws_before)]


def test_a_generator_held_elsewhere_is_reseeded_in_place(request):
    np.testing.assert_array_equal(_standard_normal(3), np.random.default_rng(_seed(request)).standard_normal(3))


_LEAKING_TESTS = """
from uopkit import Device, Tensor
from uopkit.helpers import BEAM


def test_a_leaks_three_settings():
    Device.DEFAULT = "CPU"
    Tensor.training = True
    BEAM.value = 3


def test_b_runs_as_if_alone():
    assert Device._default is None and Tensor.training is False and BEAM.value == 0
"""


def test_a_test_that_leaves_a_process_setting_changed_fails_and_the_next_runs_as_if_alone(tmp_path: Path) -> None:
    # the suite's conftest beside two tests, run in one process: the first errors at its teardown naming what it left
    # changed (test_scatter.py's fixture left Device.DEFAULT pinned to the device it had resolved to), the second
    # finds the settings as they were
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_leaks.py").write_text(_LEAKING_TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("DEVICE", "BEAM")}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist"]
    cmd += [f"--rootdir={tmp_path}", "-o", "addopts=", str(tmp_path / "test_leaks.py")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, check=False)
    assert "2 passed, 1 error" in result.stdout, result.stdout + result.stderr
    assert "ERROR at teardown of test_a_leaks_three_settings" in result.stdout
    for leak in ("Device.DEFAULT's override: None before the test, 'CPU' after it", "Tensor.training", "BEAM flag"):
        assert leak in result.stdout
