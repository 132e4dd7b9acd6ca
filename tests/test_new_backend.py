"""`uopkit new-backend NAME DIR`: the generated package installs with pip, shows up as usable, and passes the
conformance suite as generated — checked for real in a temporary environment."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from uopkit.cli import IN_TREE_PLUGINS, main, new_backend
from uopkit.testing.venv import OverlayVenv

ROOT = Path(__file__).resolve().parents[1]


def test_generated_backend_installs_and_conforms(tmp_path: Path) -> None:
    folder = tmp_path / "mydev"
    assert main(["new-backend", "MYDEV", str(folder)]) == 0
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert files == {
        "pyproject.toml",
        "README.md",
        "uopkit_mydev/__init__.py",
        "uopkit_mydev/renderer.py",
        "uopkit_mydev/compiler.py",
        "uopkit_mydev/runtime.py",
        "tests/test_conformance.py",
    }
    pyproject = (folder / "pyproject.toml").read_text()
    assert '[project.entry-points.uopkit]\nmydev = "uopkit_mydev"' in pyproject
    assert "class MydevRenderer(CStyleRenderer)" in (folder / "uopkit_mydev/renderer.py").read_text()

    venv = OverlayVenv(tmp_path / "venv")
    venv.pip_install(folder)
    devices = venv.run("-m", "uopkit.cli", "devices")
    assert devices.returncode == 0, devices.stderr
    line = next(x for x in devices.stdout.splitlines() if " MYDEV " in x)
    assert "uopkit-mydev" in line and line.rstrip().endswith("usable") and "unusable" not in line

    # the generated package's own tests run the conformance command, exactly as documented, on the new backend (CI
    # runs the same suite on the emulator separately)
    own = venv.run("-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "tests"), cwd=tmp_path)
    assert own.returncode == 0, own.stdout[-5000:] + own.stderr[-2000:]
    assert "2 passed" in own.stdout, own.stdout[-2000:]


def test_conformance_suite_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("uopkit_cpu")
    venv = OverlayVenv(tmp_path / "venv")
    result = venv.run("-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "uopkit.testing",
                      "--uopkit-device=CPU", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


@pytest.mark.parametrize(
    "name, message",
    [("1DEV", "must be a letter followed by"), ("MY-DEV", "must be a letter followed by")],
)
def test_bad_names_are_refused(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        new_backend(name, tmp_path / "x")


def test_existing_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file.txt").write_text("mine")
    assert main(["new-backend", "MYDEV", str(tmp_path / "taken")]) == 2
    assert "already exists and is not an empty folder" in capsys.readouterr().err
    assert (tmp_path / "taken" / "file.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "name, message",
    [
        ("CPU", "backend name CPU is taken: CPU is the device of uopkit's own plugin uopkit-cpu (plugins/cpu)"),
        ("triton", "TRITON is the device of uopkit's own plugin uopkit-triton"),
        ("EMULATOR", "EMULATOR is uopkit's built-in backend"),
    ],
)
def test_names_of_in_tree_backends_are_refused(tmp_path: Path, name: str, message: str) -> None:
    # `pip install -e` of such a scaffold would have replaced the real plugin (same distribution, entry point, package)
    with pytest.raises(ValueError, match=re.escape(message)):
        new_backend(name, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_in_tree_plugins_are_the_plugin_folders() -> None:
    assert set(IN_TREE_PLUGINS) == {p.name.upper() for p in (ROOT / "plugins").iterdir() if p.is_dir()}


def test_names_of_installed_backends_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # installed here: a distribution uopkit-widget, one whose entry point is named gadget, a module uopkit_thing
    site = tmp_path / "site"
    for dist, entry_points in [("uopkit_widget", "widget = uopkit_widget"), ("uopkit_gizmo", "gadget = uopkit_gizmo")]:
        info = site / f"{dist}-0.3.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: 0.3\n")
        (info / "entry_points.txt").write_text(f"[uopkit]\n{entry_points}\n")
    (site / "uopkit_thing.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    refused = {
        "WIDGET": "the distribution uopkit-widget 0.3 is installed; installing yours would replace it",
        "GADGET": "uopkit-gizmo already has the uopkit entry point gadget = 'uopkit_gizmo'",
        "THING": "a module uopkit_thing is already importable here",
    }
    for name, reason in refused.items():
        assert main(["new-backend", name, str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert f"uopkit new-backend: backend name {name} is taken: {reason}" in err and "Choose another name" in err
        assert not (tmp_path / name).exists()


def test_next_steps_install_the_test_extra_and_use_this_pytest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "newdev"
    assert main(["new-backend", "NEWDEV", str(folder)]) == 0
    hint = capsys.readouterr().out.split("next:", 1)[1]
    # a bare `pytest` may be another environment's, which doesn't know --uopkit-device; pytest comes with [test]
    assert f'pip install -e "{folder}[test]"' in hint
    assert "python -m pytest --pyargs uopkit.testing --uopkit-device=NEWDEV" in hint
    readme = (folder / "README.md").read_text()
    assert 'pip install -e ".[test]"' in readme and "python -m pytest --pyargs uopkit.testing" in readme
    assert '"pytest"' in (folder / "pyproject.toml").read_text()


def test_scaffold_compiler_names_a_bad_cc_and_undeclared_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    new_backend("CCDEV", tmp_path / "ccdev")
    spec = importlib.util.spec_from_file_location("ccdev_compiler", tmp_path / "ccdev/uopkit_ccdev/compiler.py")
    assert spec is not None and spec.loader is not None
    compiler = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compiler)
    # CC is set: not "no C compiler found (... or set CC)"
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert compiler.compiler_problem() == "CC='/nonexistent/cc' is not an executable"
    monkeypatch.delenv("CC")
    cc = compiler.find_cc()
    if cc is not None:
        # a helper the preamble lacks is an error at its line, not "undefined symbol: mul" when the library loads
        (tmp_path / "k.c").write_text("int k(int a) { return mul(a, a); }\n")
        cmd = [*cc, *compiler.CFLAGS, "-o", str(tmp_path / "k.so"), str(tmp_path / "k.c")]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert result.returncode != 0 and "k.c:1" in result.stderr and "mul" in result.stderr, result.stderr
    monkeypatch.setenv("PATH", str(tmp_path))
    assert compiler.compiler_problem() == "no C compiler found (install gcc or clang, or set CC)"


def test_documented_priorities_are_the_in_tree_ones() -> None:
    """docs/writing-a-backend.md lists the in-tree priorities, so that a new backend can choose its own."""
    found = {}
    for init in sorted((ROOT / "plugins").glob("*/uopkit_*/__init__.py")):
        match = re.search(r"priority=(-?\d+)", init.read_text())
        assert match is not None, init
        found[init.parent.parent.name.upper()] = int(match.group(1))
    from uopkit.emulator import uopkit_backends

    found["EMULATOR"] = uopkit_backends()[0].priority
    listed = ", ".join(f"{name} {value}" for name, value in sorted(found.items(), key=lambda kv: -kv[1]))
    assert listed in (ROOT / "docs/writing-a-backend.md").read_text().replace("`", "")
