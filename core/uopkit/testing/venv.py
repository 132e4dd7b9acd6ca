"""Temporary Python environments for testing how plugins install: an overlay venv sees every package of the
running environment (uopkit, numpy, pytest, installed backends) and takes new distributions on top, with pip,
offline, without touching the running environment."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path


class OverlayVenv:
    """``OverlayVenv(path)`` creates a venv at `path` whose site-packages also loads this interpreter's."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.path)], check=True)
        self.python = self.path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        self.site_dir = subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        # addsitedir (not a bare path) so the parent's own .pth files (editable installs) are processed too; a
        # parent venv made with --system-site-packages also sees the base interpreter's packages, so the overlay does
        parents = [sysconfig.get_paths()["purelib"], *(p for p in site.getsitepackages() if os.path.isdir(p))]
        lines = [f"import site; site.addsitedir({p!r})\n" for p in dict.fromkeys(parents)]
        (Path(self.site_dir) / "_uopkit_overlay.pth").write_text("".join(lines))

    def pip_install(self, *projects: Path) -> subprocess.CompletedProcess[str]:
        """``pip install --no-deps -e`` each project folder into this venv (offline; build backends come from the
        parent environment). Raises CalledProcessError with pip's output on failure."""
        cmd = [sys.executable, "-m", "pip", "--python", str(self.python), "install", "-q", "--no-deps"]
        cmd += ["--no-build-isolation", "--no-index"]
        for p in projects:
            cmd += ["-e", str(p)]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, cmd, result.stdout, result.stderr)
        return result

    def add_distribution(
        self, name: str, version: str, package: str, source: str, entry_points: dict[str, str]
    ) -> None:
        """Install a one-module distribution the way an installer lays it out, without building it: the package
        `package` (its ``__init__.py`` is `source`) and a ``<name>-<version>.dist-info`` with METADATA, RECORD and an
        ``entry_points.txt`` holding `entry_points` (group -> ``"entry = module"`` lines). What a plugin loader sees is
        the same as after ``pip install`` (importlib.metadata reads only these files), at no build's cost (a pip
        install of a pyproject project builds a wheel, seconds each)."""
        site_dir = Path(self.site_dir)
        (site_dir / package).mkdir()
        (site_dir / package / "__init__.py").write_text(source)
        info = site_dir / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        groups = "".join(f"[{group}]\n{lines}\n\n" for group, lines in entry_points.items())
        (info / "entry_points.txt").write_text(groups)
        (info / "INSTALLER").write_text("uopkit.testing\n")
        files = [f"{package}/__init__.py", *(f"{info.name}/{f}" for f in ("METADATA", "entry_points.txt", "INSTALLER"))]
        (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{info.name}/RECORD"]))

    def run(
        self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python *args`` in this venv (DEVICE unset unless `env` sets it)."""
        full_env = {k: v for k, v in os.environ.items() if k not in ("DEVICE", "EMULATE", "PYTHONPATH")}
        full_env.update(env or {})
        return subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, env=full_env, cwd=cwd, check=False
        )
