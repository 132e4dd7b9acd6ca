import os
import tempfile

# set before uopkit and the OpenCL driver are loaded: check the UOp spec, keep PoCL's kernel cache out of $HOME,
# and pick the PoCL platform explicitly (a machine may have other OpenCL platforms)
os.environ.setdefault("SPEC", "1")
os.environ.setdefault("POCL_CACHE_DIR", tempfile.mkdtemp(prefix="uopkit_pocl_cache_"))
os.environ.setdefault("OPENCL_PLATFORM", "Portable Computing Language")

import pytest  # noqa: E402


def _opencl_problem() -> str | None:
    try:
        from uopkit_opencl import uopkit_backends
    except ImportError as e:
        return f"uopkit_opencl is not importable: {e}"
    return uopkit_backends()[0].availability()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problem = _opencl_problem()
    if problem is None:
        return
    # CI installs PoCL and sets UOPKIT_REQUIRE_OPENCL=1, so a missing driver fails there instead of skipping
    if os.environ.get("UOPKIT_REQUIRE_OPENCL") == "1":
        raise pytest.UsageError(f"UOPKIT_REQUIRE_OPENCL=1 but OpenCL is unusable: {problem}")
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason=f"OpenCL unusable here: {problem}")
    for item in items:
        # modules whose tests mostly render source say so with `needs_device = False`; their device tests take `dev`
        needs_device = getattr(getattr(item, "module", None), "needs_device", True)
        if str(item.fspath).startswith(here) and (needs_device or "dev" in getattr(item, "fixturenames", ())):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def dev():  # noqa: ANN201
    """The opened default OpenCL device (a CLDevice)."""
    from uopkit.device import Device
    from uopkit_opencl.runtime import CLDevice

    opened = Device["OPENCL"]
    assert isinstance(opened, CLDevice)
    return opened
