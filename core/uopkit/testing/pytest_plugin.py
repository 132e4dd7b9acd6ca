"""The conformance suite's pytest plugin: the ``--uopkit-device`` option and the fixtures its tests use.

Registered by the core's ``pytest11`` entry point, so it is active in every pytest run where uopkit is installed;
it only adds an option, a header line and fixtures. Run the suite against a backend with::

    python -m pytest --pyargs uopkit.testing --uopkit-device=NAME
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("uopkit", "uopkit conformance suite")
    group.addoption(
        "--uopkit-device",
        action="store",
        default=None,
        metavar="NAME",
        help="device the conformance suite (pytest --pyargs uopkit.testing) runs on; default: $DEVICE, else the "
        "default device",
    )


def _requested(config: pytest.Config) -> str | None:
    return config.getoption("--uopkit-device", default=None) or os.environ.get("DEVICE") or None


def pytest_report_header(config: pytest.Config) -> str | None:
    requested = _requested(config)
    if requested is None:
        return None
    return f"uopkit conformance device: {requested}"


@pytest.fixture(scope="session")
def uopkit_device(request: pytest.FixtureRequest) -> str:
    """The canonical name of the device under test (fails every test, with the reason, when it can't be used)."""
    from uopkit.device import Device, DeviceError

    requested = _requested(request.config)
    try:
        device = Device.canonicalize(requested) if requested else Device.DEFAULT
        Device[device]
    except DeviceError as e:
        pytest.fail(f"the conformance device can't be used: {e}", pytrace=False)
    return device


@pytest.fixture(scope="session")
def uopkit_peer_device(uopkit_device: str) -> str:
    """Another device to copy to and from: the emulator, or a second emulator when the emulator is under test."""
    from uopkit.device import Device

    name = Device.canonicalize(uopkit_device).partition(":")[0]
    return "EMULATOR:1" if name == "EMULATOR" else "EMULATOR"
