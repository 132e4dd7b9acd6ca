"""Tools for people who write backends: the reference emulator (`uopkit.testing.emulator`, also the built-in
EMULATOR backend) and the conformance suite every backend runs with one command::

    pytest --pyargs uopkit.testing --uopkit-device=NAME

The suite's option and fixtures come from `uopkit.testing.pytest_plugin` (a pytest11 entry point of the core).
"""
