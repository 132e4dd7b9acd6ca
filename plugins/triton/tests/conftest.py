import os

# set before uopkit is loaded: check the UOp spec in every program the tests build
os.environ.setdefault("SPEC", "1")

import pytest  # noqa: E402


def _triton_problem() -> str | None:
    try:
        from uopkit_triton import uopkit_backends
    except ImportError as e:
        return f"uopkit_triton is not importable: {e}"
    return uopkit_backends()[0].availability()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problem = _triton_problem()
    if problem is None:
        return
    # CI installs triton and sets UOPKIT_REQUIRE_TRITON=1, so a broken install fails there instead of skipping
    if os.environ.get("UOPKIT_REQUIRE_TRITON") == "1":
        raise pytest.UsageError(f"UOPKIT_REQUIRE_TRITON=1 but the Triton backend is unusable: {problem}")
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason=f"Triton backend unusable here: {problem}")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)
