import os

# check the UOp spec in every test run. uopkit's pytest plugin (an entry point) has imported uopkit before this file, so
# the flag it read from the environment is set here too; the environment carries it to the tests' subprocesses
os.environ.setdefault("SPEC", "1")
from uopkit.helpers import SPEC  # noqa: E402

SPEC.value = int(os.environ["SPEC"])


import functools  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import zlib  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from types import ModuleType  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# the random generators a test module may hold at its top level (`RNG = np.random.default_rng(0)`); the names found in
# each module, cached: the fixture below runs before every test
_GENERATOR_KINDS = (np.random.Generator, np.random.RandomState, random.Random)
_generator_names: dict[str, tuple[str, ...]] = {}


def _generators_of(module: ModuleType) -> tuple[str, ...]:
    names = _generator_names.get(module.__name__)
    if names is None:
        names = tuple(name for name, value in vars(module).items() if isinstance(value, _GENERATOR_KINDS))
        _generator_names[module.__name__] = names
    return names


def _reseed(generator: np.random.Generator | np.random.RandomState | random.Random, seed: int) -> None:
    # in place, so a helper that holds the generator itself (a default argument, an alias) draws the new stream too
    if isinstance(generator, np.random.Generator):
        # the stream of np.random.default_rng(seed) for the default bit generator (PCG64)
        generator.bit_generator.state = type(generator.bit_generator)(seed).state
    else:
        generator.seed(seed)


@pytest.fixture(autouse=True)
def _draws_of_its_own(request: pytest.FixtureRequest) -> None:
    """Each test draws from its module's generators, and from the global streams, seeded by the test's own id. Drawn
    in turn, a test's inputs depended on which tests ran before it in the process (pytest-xdist splits the tests between
    workers differently whenever tests are added), and the tests that compare with torch bit for bit met rounding
    midpoints in some runs only. The id (tests/test_x.py::test_y[params]) is the same under xdist, -k and any order."""
    seed = zlib.crc32(request.node.nodeid.encode())
    _reseed_global_streams(seed)
    module = getattr(request.node, "module", None)
    if module is None:
        return
    for name in _generators_of(module):
        _reseed(getattr(module, name), seed)


def _reseed_global_streams(seed: int) -> None:
    # the process-wide streams a test draws from without a generator of its own (`np.random.rand`, `random.random`,
    # `Tensor.randn`, `torch.randn`): seeded by the test's id too, or a test's inputs would depend on which tests its
    # xdist worker ran before it (a convergence test failed after some orders only)
    from uopkit import Tensor

    random.seed(seed)
    np.random.seed(seed)
    Tensor.manual_seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


_Setting = tuple[str, Callable[[], object], Callable[[object], None]]


def _process_settings() -> list[_Setting]:
    """(name, get, set) of the settings a test changes for the whole process: a test that leaves one changed changes
    the tests after it in its worker."""
    from uopkit.helpers import ContextVar

    # built again once torch is imported, or a flag added (a plugin's, imported lazily)
    return _build_process_settings("torch" in sys.modules, len(ContextVar._registry))


@functools.cache
def _build_process_settings(torch_loaded: bool, flags: int) -> list[_Setting]:
    import uopkit
    from uopkit import Device, Tensor, dtypes, helpers
    from uopkit.helpers import ContextVar
    from uopkit.tensor import printing
    from uopkit.tensor.torch_copies_settings import _Settings

    def _kept() -> dict[str, object]:
        return {k: v for k, v in vars(_Settings).items() if not k.startswith("__")}

    def _put_kept(values: object) -> None:
        for k, v in values.items():  # type: ignore[attr-defined]
            setattr(_Settings, k, v)

    settings: list[_Setting] = [
        # what `Device.DEFAULT = ...` set (None: the DEVICE variable or the best backend decide, read when asked)
        ("Device.DEFAULT's override", lambda: Device._default, lambda v: setattr(Device, "DEFAULT", v)),
        ("Tensor.training", lambda: Tensor.training, lambda v: setattr(Tensor, "training", v)),
        (
            "Tensor.set_num_threads's count",
            lambda: helpers.threads_chosen,
            lambda v: setattr(helpers, "threads_chosen", v),
        ),
        # torch's flags Tensor keeps (use_deterministic_algorithms, set_anomaly_enabled, ...:
        # tensor/torch_copies_settings.py)
        ("Tensor's kept torch settings", _kept, _put_kept),
        ("dtypes.default_float", lambda: dtypes.default_float, lambda v: setattr(dtypes, "default_float", v)),
        ("uopkit.is_grad_enabled()", uopkit.is_grad_enabled, uopkit.set_grad_enabled),
        # the options' fields as get_printoptions() gives them (without its deep copy: ~40 us a call)
        ("uopkit.get_printoptions()", lambda: vars(printing.options).copy(), lambda v: uopkit.set_printoptions(**v)),
    ]
    for flag in ContextVar._registry.values():
        settings.append((f"the {flag.key} flag", lambda f=flag: f.value, lambda v, f=flag: setattr(f, "value", v)))
    # torch's, where a test module has imported it (importing it here would cost every run a second)
    if torch_loaded:
        torch = sys.modules["torch"]
        settings += [
            ("torch.is_grad_enabled()", torch.is_grad_enabled, torch.set_grad_enabled),
            ("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype),
            ("torch.get_num_threads()", torch.get_num_threads, torch.set_num_threads),
        ]
    return settings


@pytest.fixture(autouse=True)
def _leaves_the_process_as_found() -> Iterator[None]:
    """A test that changes a process-wide setting (a flag, the default device, grad mode, torch's threads) and leaves
    it changed fails here, after its own fixtures are torn down; the setting is put back so the tests after it in the
    worker don't depend on it."""
    settings = _process_settings()
    before = [get() for _, get, _ in settings]
    yield
    changed = []
    for (name, get, put), value in zip(settings, before, strict=True):
        now = get()
        if now != value:
            changed.append(f"{name}: {value!r} before the test, {now!r} after it")
            put(value)
    if changed:
        pytest.fail(
            "the test left process-wide settings changed (undo them in a fixture or finally, or use "
            "monkeypatch / Context): " + "; ".join(changed),
            pytrace=False,
        )


@pytest.fixture
def avx512_cpu(monkeypatch):
    """The CPU renderer with AVX-512's vectors and registers (32 of 16 floats) whatever the host's: the tests of the
    heuristic's choices that were tuned there (an AVX2 host renders 8-float vectors, 16 registers)."""
    from dataclasses import replace

    from uopkit import Device

    renderer = Device["CPU"].renderer
    monkeypatch.setattr(renderer, "caps", replace(renderer.caps, max_vector_width=16, vector_registers=32))
    return renderer


@pytest.fixture
def gc_of_this_test():
    """For tests that call gc.collect() to see their own objects go: what existed before the test is frozen
    (gc.freeze), so a collect scans what the test made, not the session's heap (by the end of the suite over a million
    objects, mostly the schedule and kernel caches: ~2 s a collect). Frozen objects are never collected, so garbage
    left by earlier tests stays put during the test, as it would between two collects."""
    import gc

    gc.freeze()
    yield
    gc.unfreeze()
