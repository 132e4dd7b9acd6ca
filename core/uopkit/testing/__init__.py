"""Tools for people who write backends: the conformance suite every backend runs with one command::

    python -m pytest --pyargs uopkit.testing --uopkit-device=NAME

and hand-built programs to run on a device (`uopkit.testing.programs`). The reference emulator, the built-in
EMULATOR backend, is `uopkit.emulator`; `uopkit.testing.emulator` is kept as an alias of it.

The suite's option and fixtures come from `uopkit.testing.pytest_plugin` (a pytest11 entry point of the core).
"""

import sys

from uopkit import emulator

# the emulator's old home: `import uopkit.testing.emulator` / `from uopkit.testing.emulator import ...` still work
sys.modules[__name__ + ".emulator"] = emulator
