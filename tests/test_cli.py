"""The `uopkit` command and `python -m uopkit` are one program; versions come from the distributions' metadata."""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import uopkit
from uopkit.cli import compatible_core, new_backend


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEVICE": "CPU"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)


def uopkit_command() -> str:
    # the console script pip installed next to this interpreter (a venv's bin/), else the one on PATH
    beside = Path(sys.executable).with_name("uopkit")
    found = str(beside) if beside.exists() else shutil.which("uopkit")
    if found is None:
        pytest.skip("the `uopkit` console script is not installed (pip install -e . makes it)")
    return found


@pytest.mark.parametrize("args", [("devices",), ("--version",), ("--help",)])
def test_python_m_uopkit_is_the_uopkit_command(args):
    module = run(sys.executable, "-m", "uopkit", *args)
    script = run(uopkit_command(), *args)
    assert module.returncode == script.returncode == 0, module.stderr + script.stderr
    assert module.stdout == script.stdout and module.stdout


def test_bad_arguments_fail_the_same_way():
    module = run(sys.executable, "-m", "uopkit", "nonsense")
    assert module.returncode == 2
    assert "usage: uopkit" in module.stderr and "invalid choice: 'nonsense'" in module.stderr


def test_versions_come_from_metadata():
    assert uopkit.__version__ == importlib.metadata.version("uopkit")
    assert run(sys.executable, "-m", "uopkit", "--version").stdout.strip() == f"uopkit {uopkit.__version__}"
    import uopkit_cpu

    assert uopkit_cpu.__version__ == importlib.metadata.version("uopkit-cpu")


@pytest.mark.parametrize("dist", ["uopkit-cpu", "uopkit-opencl"])
def test_plugins_require_a_compatible_core(dist):
    try:
        requires = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed")
    core = [r for r in requires if re.match(r"uopkit\s*[<>=]", r)]
    assert len(core) == 1 and "<" in core[0] and ">=" in core[0], f"{dist} doesn't bound the core's version: {requires}"
    low = re.search(r">=\s*([\d.]+)", core[0])
    high = re.search(r"<\s*([\d.]+)", core[0])
    assert low and high
    version = tuple(int(p) for p in uopkit.__version__.split(".")[:2])
    assert tuple(int(p) for p in low.group(1).split(".")) <= version < tuple(int(p) for p in high.group(1).split("."))


def test_new_backend_requires_the_running_core_series(tmp_path):
    assert compatible_core("0.1.0") == "uopkit>=0.1,<0.2"
    assert compatible_core("1.4.2") == "uopkit>=1.4,<1.5"
    assert compatible_core("0+unknown") == "uopkit"
    new_backend("MYDEV", tmp_path / "mydev")
    pyproject = (tmp_path / "mydev" / "pyproject.toml").read_text()
    assert f'dependencies = ["{compatible_core(uopkit.__version__)}"]' in pyproject
    assert 'version = "0.1.0"' in pyproject
    assert (
        'importlib.metadata.version("uopkit-mydev")'
        in (tmp_path / "mydev" / "uopkit_mydev" / "__init__.py").read_text()
    )


def test_core_wheel_ships_types_license_templates_and_metadata(tmp_path):
    # a real build of the core's wheel, as pip builds it for a user (setuptools from the package index), from a copy
    # of the files it is built from so the build leaves nothing in the checkout
    root = Path(__file__).resolve().parents[1]
    src = tmp_path / "src"
    shutil.copytree(root / "core", src / "core", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(root / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
    result = run(*cmd, "-w", str(tmp_path), str(src))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = tmp_path.glob("uopkit-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "uopkit/py.typed" in names
    assert any(n.startswith("uopkit/templates/backend/") and n.endswith(".tmpl") for n in names)
    assert any(n.endswith(".dist-info/LICENSE") or "/licenses/LICENSE" in n for n in names), sorted(names)[-8:]
    assert "License: MIT" in meta and "Author: uopkit developers" in meta
    assert f"Version: {uopkit.__version__}" in meta
    assert "Provides-Extra: bench" in meta and 'tinygrad==0.14.0; extra == "bench"' in meta
