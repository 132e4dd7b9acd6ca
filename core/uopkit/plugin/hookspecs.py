"""The contract between the uopkit core and its backend plugins.

A backend is a Python distribution with an entry point in the group ``uopkit``::

    [project.entry-points.uopkit]
    mydev = "uopkit_mydev"

The module the entry point names holds ``@hookimpl`` functions (see :func:`uopkit_backends`). The core's own
built-in backends register through the same hook, so there is one path for everything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from uopkit.device import Compiled

PROJECT_NAME = "uopkit"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@dataclass(frozen=True)
class BackendInfo:
    """What a plugin tells the core about one device backend.

    Attributes:
        name: upper-case device name, e.g. ``"CPU"``; users write it as ``DEVICE=CPU`` or ``Device["cpu:1"]``.
        version: the backend's version string (usually its distribution's version).
        spec_version: the UOp spec version (``uopkit.uop.spec.SPEC_VERSION``) the backend was written for.
            Write it as a literal: it states what the plugin targets, the core refuses a mismatch.
        priority: higher is preferred when no ``DEVICE`` is set; the usable backend with the highest wins.
        open: ``open(device)`` builds the device object (a :class:`uopkit.device.Compiled`). It is called lazily,
            at most once per device string, with the full canonical string (``"CPU"``, ``"CPU:1"``).
        availability: ``availability()`` returns None when the backend can run on this machine, else a short
            human reason why not (``"no C compiler found"``). It must be cheap and must not initialise the device.
        description: one line shown by ``uopkit devices -v``.
    """

    name: str
    version: str
    spec_version: int
    priority: int
    open: Callable[[str], Compiled]
    availability: Callable[[], str | None]
    description: str = ""


@hookspec
def uopkit_backends() -> list[BackendInfo]:  # type: ignore[empty-body]
    """Return the device backends this plugin provides.

    Called once per plugin, lazily, the first time the core needs the list of backends (``Device[...]``,
    ``Device.DEFAULT``, ``uopkit devices``); the result is cached for the process.

    Not ``firstresult``: every plugin's list is collected. The core calls each plugin's implementation on its
    own, so a plugin that raises, returns something other than a list of :class:`BackendInfo`, or targets
    another spec version is reported as broken (with the reason) and never hides the other backends.

    Registration must be cheap: return the descriptions only. Import heavy modules and touch drivers inside
    ``BackendInfo.open`` (or, briefly, ``availability``), never at import time or in this hook.

    :return: a list of :class:`BackendInfo`, one per device name (usually just one).
    """
