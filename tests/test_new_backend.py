"""`uopkit new-backend NAME DIR`: the generated package installs with pip, shows up as usable, and passes the
conformance suite as generated — checked for real in a temporary environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from uopkit.cli import main, new_backend
from uopkit.testing.venv import OverlayVenv


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

    # the conformance command, exactly as documented, on the emulator
    result = venv.run("-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "uopkit.testing",
                      "--uopkit-device=EMULATOR", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout

    # the generated package's own tests run it on the new backend (that same command, with --uopkit-device=MYDEV)
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
