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
        site_dir = subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        # addsitedir (not a bare path) so the parent's own .pth files (editable installs) are processed too; a
        # parent venv made with --system-site-packages also sees the base interpreter's packages, so the overlay does
        parents = [sysconfig.get_paths()["purelib"], *(p for p in site.getsitepackages() if os.path.isdir(p))]
        lines = [f"import site; site.addsitedir({p!r})\n" for p in dict.fromkeys(parents)]
        (Path(site_dir) / "_uopkit_overlay.pth").write_text("".join(lines))

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

    def run(
        self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python *args`` in this venv (DEVICE unset unless `env` sets it)."""
        full_env = {k: v for k, v in os.environ.items() if k not in ("DEVICE", "EMULATE", "PYTHONPATH")}
        full_env.update(env or {})
        return subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, env=full_env, cwd=cwd, check=False
        )
