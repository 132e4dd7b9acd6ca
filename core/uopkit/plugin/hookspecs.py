"""The contract between the uopkit core and its backend plugins.

A backend is a Python distribution with an entry point in the group ``uopkit``::

    [project.entry-points.uopkit]
    mydev = "uopkit_mydev"

The module the entry point names holds ``@hookimpl`` functions; there is one hook, :func:`uopkit_backends`, and
pluggy's ``check_pending`` rejects any other ``uopkit_*`` name (a typo is reported, not ignored). The core's own
built-in backend (the reference emulator, ``uopkit.emulator``) registers through the same hook.

What a backend returns, per device name, is a :class:`BackendInfo`; what ``BackendInfo.open`` builds is a
:class:`uopkit.device.Compiled` made of:

- a renderer (:class:`uopkit.renderer.Renderer`, usually a ``CStyleRenderer`` subclass): ``render(name, uops)``
  turns a linear program (``uopkit.uop.spec.spec_program``: each op's arg and sources, the index dtype, the
  ordering guarantee and the semantics to match are listed in docs/writing-a-backend.md, "What a renderer
  receives") into source. Index arithmetic is in ``dtypes.index``: int32, or int64 (since spec version 2) in a
  kernel whose buffers, views or loops can pass 2**31 elements, one index dtype per program; DEFINE_VAR values are
  passed as int32 either way. `name` is any C identifier the core picks (``E_4``, ``r_3_5``, ``casts``, ``bitcast``):
  the kernel's own name must not clash with the names of the helpers a renderer emits or runs it with. Its ``caps``
  (:class:`uopkit.renderer.RendererCaps`, one frozen object) are the backend's capabilities, read by the optimizer
  and copied whole by ``EMULATE=NAME``: ``has_local``/``has_shared``/
  ``local_max``/``workgroup_max``/``subgroup_width``/``shared_max``/``global_max`` (GPU-style launch and local
  memory), ``has_threads``, ``max_vector_width``/``vector_ops``/``vector_mask_bytes``/``vector_casts``/
  ``vector_align`` (the alignment vector accesses need: the core then proves each one aligned, and the allocator's
  buffers must be aligned so), ``tensor_cores``
  (:class:`uopkit.renderer.TensorCore` descriptions, validated when built), ``pack_panel``, ``transcendental_ops``
  (the core decomposes unclaimed EXP2/LOG2/SIN/SQRT), ``supported_dtypes`` (each is tested by the conformance suite)
  and ``simd_reduce_ops``; ``extra_matcher`` holds rewrite rules run before linearizing. What each loop is for is
  the kind in its RANGE's arg (``"loop"``, ``"thread"``, ``"sum"``, ``"max"``), read back by
  ``uopkit.renderer.loops.loop_roles(uops)``;
- a compiler (:class:`uopkit.device.Compiler`): ``compile(src) -> bytes`` where ``src`` is exactly what ``render``
  returned (``str`` source, or ``bytes`` when the renderer emits a binary form), raising ``CompileError(message, src)``
  (anything but ``bytes`` returned is a ``TypeError`` naming the compiler);
  its ``cache_key`` (backend version, compiler version and flags, target) keys the core's disk cache;
- an allocator (:class:`uopkit.device.Allocator`, usually an ``LRUAllocator``): ``_alloc(size)`` returns a handle to
  at least `size` bytes (``size >= 1``: a buffer of 0 elements is allocated as 1 byte, so a handle's size need not
  be a multiple of an element's), ``_free``/``copyin``/``copyout``, optionally ``transfer(dest, src, size,
  src_device, dest_device)`` between two devices of the backend, called only when the class sets
  ``supports_transfer = True`` and both devices' allocators are of the same class, and optionally
  ``copyout_at(dest, src, offset)`` (with ``reads_at_offset = True``) for reading a part of a buffer (the default
  copies its start out), and optionally ``copyin_at(dest, src, offset)`` (with ``writes_at_offset = True``) for
  writing a part of one (`x[i] = number` on a realized tensor then stores the element without a kernel);
- a runtime: ``runtime(name, lib)`` returns a :class:`uopkit.device.Program`, called as
  ``prg(*bufs, global_size=..., local_size=..., vals=..., wait=...)``.

How the core checks it: each plugin's import, hook and availability run on their own, in a worker thread under
``UOPKIT_PLUGIN_TIMEOUT``; an import error, any exception (SystemExit included), a hang, a result that is not
a list of well-formed ``BackendInfo``, a ``spec_version`` other than ``uopkit.uop.spec.SPEC_VERSION`` or an
``availability()`` that returns a reason (or raises) makes that backend unusable with the reason shown by
``uopkit devices``, and leaves every other backend and ``import uopkit`` working. Asking for such a device by name
(``DEVICE=NAME``) raises ``DeviceError`` with the reason; an unknown name lists the installed backends. Programs
are checked against the spec (``SPEC=1``) before a renderer sees them. ``python -m pytest --pyargs uopkit.testing
--uopkit-device=NAME`` checks the rest. See docs/writing-a-backend.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pluggy

if TYPE_CHECKING:
    from uopkit.renderer import Renderer

PROJECT_NAME = "uopkit"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class OpenedDevice(Protocol):
    """What ``BackendInfo.open`` returns, as far as the contract names it: a :class:`uopkit.device.Compiled` (the
    device registry checks that it is one). A protocol here, so that the plugin layer, which the device layer is
    built on, names nothing above itself, not even for types."""

    device: str

    def synchronize(self) -> None: ...


@dataclass(frozen=True)
class BackendInfo:
    """What a plugin tells the core about one device backend.

    Attributes:
        name: upper-case device name, e.g. ``"CPU"``; users write it as ``DEVICE=CPU`` or ``Device["cpu:1"]``.
        version: the backend's version string (usually its distribution's version).
        spec_version: the UOp spec version (``uopkit.uop.spec.SPEC_VERSION``) the backend was written for.
            Write it as a literal: it states what the plugin targets, the core refuses a mismatch.
        priority: higher is preferred when no ``DEVICE`` is set; the usable backend with the highest wins. In tree:
            CUDA 20, CPU 10, OPENCL 5, TRITON 1, EMULATOR -1000; a new or slow backend stays below CPU's 10 (0).
        open: ``open(device)`` builds the device object (a :class:`uopkit.device.Compiled`). It is called lazily,
            at most once per device string, with the full canonical string (``"CPU"``, ``"CPU:1"``).
        availability: ``availability()`` returns None when the backend can run on this machine, else a short
            human reason why not (``"no C compiler found"``; an empty string still means unusable, shown as "no
            reason given"). It must be cheap and must not initialise the device.
        description: one line shown by ``uopkit devices -v``.
        renderer: optional ``renderer()`` that builds the backend's renderer without opening a device (no driver
            needed). The reference emulator uses it for ``EMULATE=NAME``, to run NAME's programs on any machine.
    """

    name: str
    version: str
    spec_version: int
    priority: int
    open: Callable[[str], OpenedDevice]
    availability: Callable[[], str | None]
    description: str = ""
    renderer: Callable[[], Renderer] | None = None


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
