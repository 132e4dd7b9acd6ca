"""The plugin manager: discovery through the hook, and isolation of broken plugins."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import uopkit_cpu
from uopkit.device import Compiled, CompileError, Device
from uopkit.plugin import BackendInfo, hookimpl
from uopkit.plugin.manager import BackendManager
from uopkit.renderer.cstyle import CStyleRenderer
from uopkit.testing.venv import OverlayVenv
from uopkit.uop.spec import SPEC_VERSION


def _never_open(device: str):  # noqa: ANN202 - never called
    raise AssertionError("backends are not opened while being listed")


def _info(name: str, spec_version: int = SPEC_VERSION, availability=lambda: None) -> BackendInfo:  # noqa: ANN001
    return BackendInfo(name, "1.2.3", spec_version, 0, _never_open, availability, "test backend")


class RaisingHook:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        raise RuntimeError("driver exploded")


class MalformedDict:
    @hookimpl
    def uopkit_backends(self):  # noqa: ANN201 - malformed on purpose
        return {"name": "DICT"}


class MalformedItems:
    @hookimpl
    def uopkit_backends(self):  # noqa: ANN201 - malformed on purpose
        return ["CPU"]


class LowerCaseName:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [_info("lower")]


class FutureSpec:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [_info("FUTURE", spec_version=SPEC_VERSION + 1)]


class RaisingAvailability:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        def availability() -> str | None:
            raise OSError("libfoo.so not found")

        return [_info("FLAKY", availability=availability)]


class UnknownHook:
    @hookimpl
    def uopkit_backendz(self) -> list[BackendInfo]:
        return []


class DuplicateCPU:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [_info("CPU")]


def fresh_manager() -> BackendManager:
    manager = BackendManager(
        builtins=["uopkit_no_such_builtin"],
        entry_points=[
            EntryPoint(name="cpu", value="uopkit_cpu", group="uopkit"),
            EntryPoint(name="gone", value="uopkit_no_such_module_xyz", group="uopkit"),
        ],
    )
    for plugin, name in [
        (RaisingHook(), "raising"),
        (MalformedDict(), "dict"),
        (MalformedItems(), "items"),
        (LowerCaseName(), "lower"),
        (FutureSpec(), "future"),
        (RaisingAvailability(), "flaky"),
        (UnknownHook(), "typo"),
    ]:
        manager.register(plugin, name=name, distribution=f"uopkit-{name}")
    return manager


def test_broken_plugins_are_reported_and_cpu_still_works() -> None:
    statuses = fresh_manager().backends()
    cpu = statuses["CPU"]
    # an EntryPoint built by hand has no distribution: the plugin is shown by its entry point name
    assert cpu.usable and cpu.reason is None and cpu.plugin == "cpu"
    assert cpu.info is not None and cpu.info.priority == 10 and cpu.spec_version == SPEC_VERSION

    expected = {
        "GONE": "failed to import uopkit_no_such_module_xyz: ModuleNotFoundError",
        "UOPKIT_NO_SUCH_BUILTIN": "failed to import uopkit_no_such_builtin",
        "RAISING": "uopkit_backends() raised RuntimeError: driver exploded",
        "DICT": "uopkit_backends() returned dict, expected list[BackendInfo]",
        "ITEMS": "uopkit_backends() returned a list holding str, expected BackendInfo",
        "LOWER": "invalid backend name 'lower'",
        "FUTURE": f"targets UOp spec version {SPEC_VERSION + 1}, but this uopkit implements spec version",
        "FLAKY": "availability check raised OSError: libfoo.so not found",
        "TYPO": "invalid plugin: unknown hook 'uopkit_backendz'",
    }
    for name, reason in expected.items():
        status = statuses[name]
        assert not status.usable, name
        assert status.reason is not None and reason in status.reason, (name, status.reason)
        assert status.status_text.startswith("unusable: ")
    assert statuses["UOPKIT_NO_SUCH_BUILTIN"].plugin == "uopkit"
    # a wrong spec version still shows what the plugin is
    assert statuses["FUTURE"].info is not None and statuses["FUTURE"].version == "1.2.3"


def test_duplicate_name_is_an_error_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    def statuses() -> dict:
        manager = BackendManager(builtins=[], entry_points=[])
        manager.register(uopkit_cpu, name="cpu", distribution="uopkit-cpu")
        manager.register(DuplicateCPU(), name="dup", distribution="uopkit-dup")
        return manager.backends()

    monkeypatch.delenv("UOPKIT_BACKEND_CPU", raising=False)
    both = statuses()
    for key, plugin in [("CPU", "uopkit-cpu"), ("CPU (uopkit-dup)", "uopkit-dup")]:
        status = both[key]
        assert not status.usable and status.conflict and status.plugin == plugin and status.reason is not None
        assert "claimed by 2 distributions: uopkit-cpu, uopkit-dup" in status.reason
        assert "UOPKIT_BACKEND_CPU=<distribution>" in status.reason
    # the user chooses one (distribution names compare like pip's)
    monkeypatch.setenv("UOPKIT_BACKEND_CPU", "uopkit_CPU")
    chosen = statuses()
    assert chosen["CPU"].usable and chosen["CPU"].plugin == "uopkit-cpu" and not chosen["CPU"].conflict
    assert chosen["CPU (uopkit-dup)"].reason == "not chosen (UOPKIT_BACKEND_CPU=uopkit_CPU)"
    monkeypatch.setenv("UOPKIT_BACKEND_CPU", "uopkit-dup")
    assert statuses()["CPU"].plugin == "uopkit-dup" and statuses()["CPU"].usable
    monkeypatch.setenv("UOPKIT_BACKEND_CPU", "uopkit-nope")
    wrong = statuses()["CPU"]
    assert not wrong.usable and "UOPKIT_BACKEND_CPU=uopkit-nope, but CPU is provided by uopkit-cpu, uopkit-dup" in (
        wrong.reason or ""
    )


class Hostile:
    """Plugin code that misbehaves in the ways a process must survive; `release` ends the hangs."""

    release = threading.Event()

    def __init__(self, where: str, how: str) -> None:
        self.where, self.how = where, how

    def misbehave(self) -> None:
        if self.how == "exit":
            raise SystemExit(3)
        if self.how == "interrupt":
            raise KeyboardInterrupt
        Hostile.release.wait(60)

    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        if self.where == "hook":
            self.misbehave()

        def availability() -> str | None:
            self.misbehave()
            return None

        return [_info(f"{self.where}_{self.how}".upper(), availability=availability)]


def test_plugin_code_is_isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_PLUGIN_TIMEOUT", "1")
    manager = BackendManager(builtins=[], entry_points=[])
    manager.register(uopkit_cpu, name="cpu", distribution="uopkit-cpu")
    for where in ("hook", "availability"):
        for how in ("exit", "interrupt", "hang"):
            manager.register(Hostile(where, how), name=f"{where}_{how}", distribution=f"uopkit-{where}-{how}")
    try:
        statuses = manager.backends()
    finally:
        Hostile.release.set()
    assert statuses["CPU"].usable
    expected = {
        "HOOK_EXIT": "uopkit_backends() raised SystemExit: 3",
        "HOOK_INTERRUPT": "uopkit_backends() raised KeyboardInterrupt",
        "HOOK_HANG": "uopkit_backends() did not finish within 1 s (UOPKIT_PLUGIN_TIMEOUT)",
        "AVAILABILITY_EXIT": "availability check raised SystemExit: 3",
        "AVAILABILITY_INTERRUPT": "availability check raised KeyboardInterrupt",
        "AVAILABILITY_HANG": "availability check did not finish within 1 s (UOPKIT_PLUGIN_TIMEOUT); it was abandoned",
    }
    for name, reason in expected.items():
        assert not statuses[name].usable and reason in (statuses[name].reason or ""), (name, statuses[name])


def test_builtins_register_through_the_hook() -> None:
    manager = BackendManager(builtins=["uopkit_cpu"], entry_points=[])
    status = manager.backends()["CPU"]
    assert status.usable and status.plugin == "uopkit"


def test_loading_is_lazy_and_cached() -> None:
    manager = BackendManager(builtins=[], entry_points=[EntryPoint(name="cpu", value="uopkit_cpu", group="uopkit")])
    assert not manager.pm.get_plugins()
    first = manager.backends()
    assert manager.backends() == first
    assert list(first) == ["CPU"]


class Ranked:
    """Three backends of different priorities; records whose availability was checked."""

    def __init__(self) -> None:
        self.checked: list[str] = []

    def _check(self, name: str, why_not: str | None) -> Callable[[], str | None]:
        def availability() -> str | None:
            self.checked.append(name)
            return why_not

        return availability

    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [
            BackendInfo("LOW", "1", SPEC_VERSION, 1, _never_open, self._check("LOW", None)),
            BackendInfo("HIGH", "1", SPEC_VERSION, 30, _never_open, self._check("HIGH", "no such hardware")),
            BackendInfo("MID", "1", SPEC_VERSION, 20, _never_open, self._check("MID", None)),
        ]


def test_default_checks_availability_in_priority_order_up_to_the_first_usable() -> None:
    # a backend's availability may import a driver and probe hardware: picking the default device checks only the
    # backends that outrank it, each once; listing them all checks the rest
    manager, ranked = BackendManager(builtins=[], entry_points=[]), Ranked()
    manager.register(ranked, name="ranked", distribution="uopkit-ranked")
    best, contested = manager.best()
    assert best is not None and best.name == "MID" and contested is None
    assert ranked.checked == ["HIGH", "MID"]
    assert manager.status("MID") == best and ranked.checked == ["HIGH", "MID"]
    statuses = manager.backends()
    assert ranked.checked == ["HIGH", "MID", "LOW"]
    assert statuses["LOW"].usable and not statuses["HIGH"].usable and statuses["HIGH"].reason == "no such hardware"
    assert all(s.checked for s in statuses.values())
    manager.backends()
    assert ranked.checked == ["HIGH", "MID", "LOW"]


def _run(code: str, extra_path: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(extra_path), env.get("PYTHONPATH", "")] if p)
    env.pop("DEVICE", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd)


def test_import_is_cheap() -> None:
    # importing uopkit touches no plugin; listing backends opens no device
    code = (
        "import sys, uopkit\n"
        "assert 'uopkit_cpu' not in sys.modules\n"
        "uopkit.Device.backends()\n"
        "assert 'uopkit_cpu' in sys.modules and 'uopkit_cpu.runtime' not in sys.modules\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr


def test_installed_broken_entry_point(tmp_path: Path) -> None:
    # a real installed distribution whose entry point names a module that does not exist
    dist_info = tmp_path / "uopkit_broken-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: uopkit-broken\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[uopkit]\nbroken = uopkit_broken_missing\n")
    result = _run("from uopkit.cli import main; main(['devices'])", extra_path=tmp_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    cpu = next(line for line in lines if " CPU " in line)
    assert cpu.startswith("*") and "uopkit-cpu" in cpu and "usable" in cpu and "unusable" not in cpu
    broken = next(line for line in lines if "BROKEN" in line)
    assert "uopkit-broken" in broken and "unusable: failed to import uopkit_broken_missing" in broken


# ---------------------------------------------------------------------------------------------------------------------
# deliberately broken plugins, installed into a temporary environment next to the real CPU plugin

BROKEN_PLUGINS = {
    # name: (module source, the reason `uopkit devices` must show)
    "importfail": ("import uopkit_no_such_driver_binding\n", "failed to import uopkit_importfail: ModuleNotFoundError"),
    "raises": (
        "from uopkit.plugin import hookimpl\n\n"
        "@hookimpl\ndef uopkit_backends():\n    raise RuntimeError('driver exploded')\n",
        "uopkit_backends() raised RuntimeError: driver exploded",
    ),
    "malformed": (
        "from uopkit.plugin import hookimpl\n\n@hookimpl\ndef uopkit_backends():\n    return {'name': 'MALFORMED'}\n",
        "uopkit_backends() returned dict, expected list[BackendInfo]",
    ),
    "oldspec": (
        "from uopkit.plugin import BackendInfo, hookimpl\n\n"
        "@hookimpl\ndef uopkit_backends():\n"
        "    return [BackendInfo('OLDSPEC', '0.3', 999, 50, lambda d: None, lambda: None)]\n",
        "targets UOp spec version 999, but this uopkit implements spec version",
    ),
    "nodriver": (
        "from uopkit.plugin import BackendInfo, hookimpl\n\n"
        "@hookimpl\ndef uopkit_backends():\n"
        f"    return [BackendInfo('NODRIVER', '0.3', {SPEC_VERSION}, 100, lambda d: None,\n"
        "        lambda: 'libnodriver.so not found')]\n",
        "unusable: libnodriver.so not found",
    ),
}


def _add_plugin(venv: OverlayVenv, name: str, source: str, entry: str | None = None) -> None:
    # distribution uopkit-<name>, package uopkit_<name>, entry point `<entry or name> = uopkit_<name>` in group uopkit
    # (laid out as an installer would, not built: test_new_backend pip-installs a real plugin project)
    venv.add_distribution(
        f"uopkit-{name}", "0.3", f"uopkit_{name}", source, {"uopkit": f"{entry or name} = uopkit_{name}"}
    )


@pytest.fixture(scope="module")
def broken_venv(tmp_path_factory: pytest.TempPathFactory) -> OverlayVenv:
    venv = OverlayVenv(tmp_path_factory.mktemp("broken_plugins") / "venv")
    for name, (source, _) in BROKEN_PLUGINS.items():
        _add_plugin(venv, name, source)
    return venv


def test_installed_broken_plugins_are_reported(broken_venv: OverlayVenv) -> None:
    result = broken_venv.run("-m", "uopkit.cli", "devices")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name, (_, reason) in BROKEN_PLUGINS.items():
        line = next((x for x in lines if f" {name.upper()} " in x), None)
        assert line is not None, (name, result.stdout)
        assert f"uopkit-{name}" in line and reason in line, line
        assert "unusable" in line
    cpu = next(x for x in lines if " CPU " in x)
    # NODRIVER has a higher priority than CPU but can't run here, so CPU stays the default
    assert cpu.startswith("*") and cpu.rstrip().endswith("usable") and "unusable" not in cpu


def test_broken_plugins_break_nothing_else(broken_venv: OverlayVenv) -> None:
    code = (
        "import uopkit\nfrom uopkit import Tensor\n"
        "print((Tensor([1.0, 2.0], device='CPU') * 3).tolist(), (Tensor([4], device='EMULATOR') + 1).tolist())\n"
    )
    result = broken_venv.run("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[3.0, 6.0] [5]"


def test_device_errors_name_the_backends(broken_venv: OverlayVenv) -> None:
    code = "from uopkit import Tensor\nTensor([1]).realize()\n"
    nope = broken_venv.run("-c", code, env={"DEVICE": "NOPE"})
    assert nope.returncode != 0
    assert "unknown device NOPE; installed backends:" in nope.stderr and "CPU (usable)" in nope.stderr
    assert "NODRIVER (unusable: libnodriver.so not found)" in nope.stderr
    # asking by name for a backend that can't run says why, loudly
    old = broken_venv.run("-c", code, env={"DEVICE": "OLDSPEC"})
    assert old.returncode != 0 and "cannot be used here: targets UOp spec version 999" in old.stderr


# ---------------------------------------------------------------------------------------------------------------------
# a kernel that fails to compile


class BrokenCRenderer(CStyleRenderer):
    device = "BADC"

    def preamble(self, uops: list) -> list[str]:  # noqa: ANN001 - the base signature
        return ["#include <math.h>", "this line is not C;"]


def _open_badc(device: str) -> Compiled:
    from uopkit_cpu.compiler import ClangCompiler
    from uopkit_cpu.runtime import CPUAllocator, CPUProgram

    return Compiled(device, CPUAllocator(), BrokenCRenderer(), ClangCompiler(), CPUProgram)


class BrokenCompilerBackend:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [BackendInfo("BADC", "0.0", SPEC_VERSION, -50, _open_badc, lambda: None, "emits broken C")]


def test_compile_error_shows_source_and_compiler_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from uopkit.plugin.manager import get_manager
    from uopkit.tensor import Tensor

    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    get_manager().register(BrokenCompilerBackend(), name="badc-test")
    try:
        with pytest.raises(CompileError) as info:
            (Tensor([1.0, 2.0], device="BADC") + 1).realize()
    finally:
        get_manager().unregister("badc-test")
        Device._opened.pop("BADC", None)
    text = str(info.value)
    # (the traceback holds the BADC tensor in a reference cycle: collected now, not left for a later test's TinyJit,
    # which realizes every live tensor with a pending write, to find on a device that is gone)
    del info
    gc.collect()
    # the compiler's own message, and the numbered source of the kernel
    assert "error" in text and "this line is not C" in text
    assert "--- source ---" in text and "void E_" in text
    assert "failed to compile on BADC" in text


def test_emulator_is_built_in() -> None:
    statuses = BackendManager(entry_points=[]).backends()
    emulator = statuses["EMULATOR"]
    assert emulator.usable and emulator.plugin == "uopkit" and emulator.spec_version == SPEC_VERSION
    assert emulator.info is not None and emulator.info.renderer is not None


class RendererNotCallable:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [BackendInfo("NOTCALL", "1", SPEC_VERSION, 0, _never_open, lambda: None, renderer="nope")]  # type: ignore[arg-type]


def test_renderer_field_must_be_callable() -> None:
    manager = BackendManager(builtins=[], entry_points=[])
    manager.register(RendererNotCallable(), name="notcall")
    status = manager.backends()["NOTCALL"]
    assert not status.usable and status.reason is not None and "renderer must be None or callable" in status.reason


# ---------------------------------------------------------------------------------------------------------------------
# hostile plugins, installed: one exits at import, three hang (at import, in the hook, in availability), and one
# claims the CPU device name under the CPU plugin's own entry point name

HOSTILE_PLUGINS = {
    "exits": "raise SystemExit(3)\n",
    "hangimport": "import time\ntime.sleep(3600)\n",
    "hanghook": "import time\nfrom uopkit.plugin import hookimpl\n\n"
    "@hookimpl\ndef uopkit_backends():\n    time.sleep(3600)\n",
    "hangavail": "import time\nfrom uopkit.plugin import BackendInfo, hookimpl\n\n"
    "@hookimpl\ndef uopkit_backends():\n"
    f"    return [BackendInfo('HANGAVAIL', '0.3', {SPEC_VERSION}, 0, lambda d: None, lambda: time.sleep(3600))]\n",
    "evilcpu": "from uopkit.plugin import BackendInfo, hookimpl\n\n"
    "@hookimpl\ndef uopkit_backends():\n"
    f"    return [BackendInfo('CPU', '6.6.6', {SPEC_VERSION}, 100, lambda d: None, lambda: None)]\n",
}
HOSTILE_ENV = {"UOPKIT_PLUGIN_TIMEOUT": "2"}


@pytest.fixture(scope="module")
def hostile_venv(tmp_path_factory: pytest.TempPathFactory) -> OverlayVenv:
    venv = OverlayVenv(tmp_path_factory.mktemp("hostile_plugins") / "venv")
    for name, source in HOSTILE_PLUGINS.items():
        # evilcpu: the same entry point name as the real CPU plugin
        _add_plugin(venv, name, source, entry="cpu" if name == "evilcpu" else None)
    return venv


def test_hostile_plugins_are_reported_not_waited_on(hostile_venv: OverlayVenv) -> None:
    result = hostile_venv.run("-m", "uopkit.cli", "devices", env=HOSTILE_ENV)
    # SystemExit at import did not end the process; the hung threads did not keep it alive
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    expected = {
        "EXITS": "failed to import uopkit_exits: SystemExit: 3",
        "HANGIMPORT": "importing uopkit_hangimport did not finish within 2 s (UOPKIT_PLUGIN_TIMEOUT)",
        "HANGHOOK": "uopkit_backends() did not finish within 2 s",
        "HANGAVAIL": "availability check did not finish within 2 s",
    }
    for name, reason in expected.items():
        line = next((x for x in lines if f" {name} " in x), None)
        assert line is not None and reason in line and "unusable" in line, (name, result.stdout)
    # both CPU claims are listed, each naming both distributions; there is no default device
    cpu_lines = [x for x in lines if x[2:].startswith("CPU ")]
    assert len(cpu_lines) == 2 and {"uopkit-cpu", "uopkit-evilcpu"} <= {x.split()[4] for x in cpu_lines}, cpu_lines
    for line in cpu_lines:
        assert "claimed by 2 distributions" in line and "UOPKIT_BACKEND_CPU=" in line
    assert any(x.startswith("no default device:") and "claimed by 2" in x for x in lines), result.stdout


def test_device_by_name_loads_only_what_it_needs(hostile_venv: OverlayVenv) -> None:
    code = (
        "import sys\nfrom uopkit import Tensor\n"
        "print((Tensor([1.0, 2.0]) * 3).tolist())\n"
        "print(sorted(m for m in sys.modules if m.startswith('uopkit_')))\n"
    )
    # DEVICE=CPU imports the entry points named cpu: both claims are seen, and the error names both
    clash = hostile_venv.run("-c", code, env={**HOSTILE_ENV, "DEVICE": "CPU"})
    assert clash.returncode != 0
    assert "claimed by 2 distributions: " in clash.stderr and "uopkit-evilcpu" in clash.stderr, clash.stderr
    chosen = hostile_venv.run("-c", code, env={**HOSTILE_ENV, "DEVICE": "CPU", "UOPKIT_BACKEND_CPU": "uopkit-cpu"})
    assert chosen.returncode == 0, chosen.stderr
    result, modules = chosen.stdout.splitlines()
    assert result == "[3.0, 6.0]"
    # the hostile plugins were never imported (nor waited for)
    assert (
        modules
        == "['uopkit_cpu', 'uopkit_cpu.compiler', 'uopkit_cpu.renderer', 'uopkit_cpu.runtime', 'uopkit_evilcpu']"
    )


THREADS_CODE = """
import threading
from uopkit import Tensor
results, errors = {}, []
barrier = threading.Barrier(4)
def work(i):
    try:
        barrier.wait()
        t = (Tensor.arange(8 + i).float() * (i + 1)).sum()
        results[i] = t.item()
    except BaseException as e:
        errors.append(f"{type(e).__name__}: {e}")
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(sorted(results.items()), errors)
"""


def test_threads_in_a_cold_process() -> None:
    # four threads ask for the default device at once in a process that has loaded no plugin yet
    expected = [(i, float(sum(range(8 + i)) * (i + 1))) for i in range(4)]
    for _ in range(3):
        result = _run(THREADS_CODE)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"{expected} []", result.stdout


def _open_exits(device: str) -> Compiled:
    raise SystemExit("driver said bye")


class ExitingOpen:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [BackendInfo("EXITOPEN", "1", SPEC_VERSION, -100, _open_exits, lambda: None)]


def test_open_raising_system_exit_is_a_device_error() -> None:
    from uopkit.device import DeviceError
    from uopkit.plugin.manager import get_manager

    get_manager().register(ExitingOpen(), name="exit-open-test")
    try:
        with pytest.raises(DeviceError, match="failed to open EXITOPEN: SystemExit: driver said bye"):
            Device["EXITOPEN"]
    finally:
        get_manager().unregister("exit-open-test")


# ---------------------------------------------------------------------------------------------------------------------
# newcomers' slips: each gets a message that says what to change


class TwiceTheSameName:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [_info("TWICE"), _info("TWICE")]


class ClaimsTwin:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [_info("TWIN")]


def test_one_plugin_returning_a_name_twice_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UOPKIT_BACKEND_TWICE", raising=False)
    manager = BackendManager(builtins=[], entry_points=[])
    manager.register(TwiceTheSameName(), name="twice", distribution="uopkit-twice")
    status = manager.backends()["TWICE"]
    assert not status.usable and status.plugin == "uopkit-twice"
    assert status.reason == "uopkit_backends() returned TWICE 2 times; return one BackendInfo per device name"


def test_two_entry_points_of_one_distribution_claiming_a_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # not "claimed by 2 distributions: uopkit-twin, uopkit-twin", whose advice (UOPKIT_BACKEND_TWIN) can't settle it
    monkeypatch.setenv("UOPKIT_BACKEND_TWIN", "uopkit-twin")
    manager = BackendManager(builtins=[], entry_points=[])
    manager.register(ClaimsTwin(), name="twin", distribution="uopkit-twin")
    manager.register(ClaimsTwin(), name="twin2", distribution="uopkit_Twin")
    status = manager.backends()["TWIN"]
    assert not status.usable and status.reason is not None
    assert "device name TWIN is claimed 2 times by uopkit-twin (by several of its entry points" in status.reason
    assert "distributions" not in status.reason


HOOKLESS_MODULES = {
    # module source: what `uopkit devices` and DEVICE=<name> must say
    "uopkit_undecorated": (
        "from uopkit.plugin import BackendInfo\n\ndef uopkit_backends():\n    return []\n",
        "uopkit_undecorated.uopkit_backends is not marked @hookimpl, so it was never called; decorate it with "
        "`@hookimpl` (from uopkit.plugin import hookimpl)",
    ),
    "uopkit_empty": (
        "X = 1\n",
        "uopkit_empty has no @hookimpl function; it must define `@hookimpl def uopkit_backends()`",
    ),
}


@pytest.mark.parametrize("module", list(HOOKLESS_MODULES))
def test_entry_point_without_hookimpl_is_reported(module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from uopkit.device import DeviceError
    from uopkit.plugin.manager import set_manager

    source, reason = HOOKLESS_MODULES[module]
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    name = module.removeprefix("uopkit_")
    entry_points = [EntryPoint(name=name, value=module, group="uopkit")]
    # listed (it used to vanish from `uopkit devices`), with the reason
    listed = BackendManager(builtins=[], entry_points=entry_points).backends()[name.upper()]
    assert not listed.usable and listed.info is None and listed.reason == reason
    # asked for by name: the reason, not "unknown device"
    old = set_manager(BackendManager(builtins=[], entry_points=entry_points))
    try:
        with pytest.raises(DeviceError) as info:
            Device._usable_status(name.upper())
    finally:
        set_manager(old)
    assert "unknown device" not in str(info.value) and reason in str(info.value)


@pytest.mark.parametrize("empty", ["", "  "])
def test_empty_availability_reason_gets_a_placeholder(empty: str) -> None:
    manager = BackendManager(builtins=[], entry_points=[])
    manager.register(_Available(empty), name="blank", distribution="uopkit-blank")
    status = manager.backends()["BLANK"]
    assert not status.usable
    assert status.status_text == (
        f"unusable: (no reason given: availability() returned {empty!r}; it returns None when the backend can run)"
    )


class _Available:
    """One backend (BLANK unless named) whose availability() returns `reason`."""

    def __init__(self, reason: str | None, name: str = "BLANK") -> None:
        self.reason, self.name = reason, name

    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [_info(self.name, availability=lambda: self.reason)]


def test_a_replaced_plugin_gets_its_own_availability(monkeypatch: pytest.MonkeyPatch) -> None:
    # availability results were cached by id() of the BackendInfo: once a plugin was unregistered and its
    # BackendInfo freed, the next plugin's BackendInfo could land at the same address and inherit the old result
    # (CI saw an available backend reported "no GPU", the reason of the one registered before it). Every object
    # getting the same id() here makes that address reuse certain.
    import uopkit.plugin.manager as manager_module

    monkeypatch.setattr(manager_module, "id", lambda obj: 0, raising=False)
    manager = BackendManager(builtins=[], entry_points=[])
    for round_ in range(4):
        why_not = None if round_ % 2 else f"not here ({round_})"
        manager.register(_Available(why_not, "SWAPPED"), name="swapped")
        status = manager.status("SWAPPED")
        assert status is not None and status.reason == why_not and status.usable == (why_not is None)
        del status  # nothing here keeps the BackendInfo alive once unregistered
        manager.unregister("swapped")
