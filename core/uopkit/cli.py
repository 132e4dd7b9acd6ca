"""The `uopkit` command line."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.resources
import importlib.resources.abc
import importlib.util
import pathlib
import re
import sys
from collections.abc import Sequence

from uopkit.device import Device, DeviceError


def cmd_devices(args: argparse.Namespace) -> int:
    """One line per installed backend: name, version, spec version, distribution, status, default mark."""
    statuses = Device.backends()
    if not statuses:
        print("no backends installed; try: pip install ./plugins/cpu")
        return 0
    try:
        default: str | None = Device.DEFAULT.partition(":")[0]
        default_problem = None
    except DeviceError as e:
        default, default_problem = None, str(e).splitlines()[0].removeprefix("no default device: ")
    rows = sorted(statuses.values(), key=lambda s: (-(s.info.priority if s.info else -(10**9)), s.name))
    name_w = max(len(s.name) for s in rows)
    version_w = max(len(s.version) for s in rows)
    dist_w = max(len(s.plugin) for s in rows)
    for s in rows:
        spec = "?" if s.spec_version is None else str(s.spec_version)
        mark = "*" if s.name == default and s.usable else " "
        line = (
            f"{mark} {s.name:<{name_w}}  {s.version:<{version_w}}  spec {spec:<2} {s.plugin:<{dist_w}}  {s.status_text}"
        )
        if args.verbose and s.info is not None and s.info.description:
            line += f"  ({s.info.description})"
        print(line)
    if default_problem is not None:
        print(f"no default device: {default_problem}")
    else:
        print("* default device (set DEVICE=... to choose another)")
    return 0


BACKEND_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")

# the backends that ship with uopkit: the core's built-in EMULATOR and the plugins in plugins/<name> (distribution
# uopkit-<name>, package uopkit_<name>), whether installed here or not
BUILTIN_BACKEND_NAMES: tuple[str, ...] = ("EMULATOR",)
IN_TREE_PLUGINS: tuple[str, ...] = ("CPU", "CUDA", "OPENCL", "TRITON")


def name_collision(name: str) -> str | None:
    """Why a new backend called `name` (upper case) would replace or shadow an existing one, or None: an in-tree
    backend's name, or an installed distribution, entry point or import package its scaffold would reuse."""
    lower = name.lower()
    dist, package = f"uopkit-{lower.replace('_', '-')}", f"uopkit_{lower}"
    if name in BUILTIN_BACKEND_NAMES:
        return f"{name} is uopkit's built-in backend"
    if name in IN_TREE_PLUGINS:
        return f"{name} is the device of uopkit's own plugin {dist} (plugins/{lower}); yours would replace it"
    try:
        found = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        found = None
    if found is not None:
        return f"the distribution {dist} {found.version} is installed; installing yours would replace it"
    for ep in importlib.metadata.entry_points(group="uopkit"):
        if ep.name.lower() == lower:
            owner = ep.dist.name if ep.dist is not None else "an installed distribution"
            return f"{owner} already has the uopkit entry point {ep.name} = {ep.value!r}"
    if importlib.util.find_spec(package) is not None:
        return f"a module {package} is already importable here; yours would shadow it or be shadowed"
    return None


def compatible_core(version: str) -> str:
    """The requirement on the core a new backend declares: the running core's minor series, ``uopkit>=0.1,<0.2`` for
    0.1.3 (the plugin contract may change between minor versions); just ``uopkit`` when the version is unknown."""
    parts = version.split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return "uopkit"
    major, minor = int(parts[0]), int(parts[1])
    return f"uopkit>={major}.{minor},<{major}.{minor + 1}"


def new_backend(name: str, folder: pathlib.Path) -> list[pathlib.Path]:
    """Write a complete, installable backend package for device `name` into `folder`; returns the files written.

    Raises ValueError for a name that is not an identifier or collides with an existing backend (`name_collision`), or
    a folder that exists and is not empty."""
    name = name.upper()
    if not BACKEND_NAME.match(name):
        raise ValueError(f"backend name {name!r} must be a letter followed by letters, digits or _ (e.g. MYDEV)")
    collision = name_collision(name)
    if collision is not None:
        raise ValueError(
            f"backend name {name} is taken: {collision}. Choose another name (or, for an earlier scaffold of "
            f"yours, pip uninstall it first)"
        )
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"{folder} already exists and is not an empty folder; choose a new one")
    from uopkit import __version__
    from uopkit.uop.spec import SPEC_VERSION

    lower = name.lower()
    package = f"uopkit_{lower}"
    values = {
        "{{NAME}}": name,
        "{{LOWER}}": lower,
        "{{PACKAGE}}": package,
        "{{DIST}}": f"uopkit-{lower.replace('_', '-')}",
        "{{CLASS}}": "".join(part.capitalize() for part in lower.split("_") if part),
        "{{SPEC_VERSION}}": str(SPEC_VERSION),
        "{{UOPKIT_REQUIREMENT}}": compatible_core(__version__),
    }
    templates = importlib.resources.files("uopkit.templates") / "backend"
    written: list[pathlib.Path] = []

    def copy(src: importlib.resources.abc.Traversable, dest: pathlib.Path) -> None:
        for entry in sorted(src.iterdir(), key=lambda e: e.name):
            # the template folder "package" becomes the backend's import package
            target = dest / (package if entry.name == "package" else entry.name)
            if entry.is_dir():
                copy(entry, target)
            elif entry.name.endswith(".tmpl"):
                text = entry.read_text()
                for key, value in values.items():
                    text = text.replace(key, value)
                out = dest / entry.name.removesuffix(".tmpl")
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(text)
                written.append(out)

    copy(templates, folder)
    return written


def cmd_new_backend(args: argparse.Namespace) -> int:
    folder = pathlib.Path(args.dir)
    try:
        written = new_backend(args.name, folder)
    except ValueError as e:
        print(f"uopkit new-backend: {e}", file=sys.stderr)
        return 2
    name = args.name.upper()
    for path in written:
        print(f"wrote {path}")
    # the [test] extra brings pytest; `python -m pytest` is this environment's pytest, not another one on PATH
    print(
        f'\nnext:\n  pip install -e "{folder}[test]"\n  uopkit devices\n'
        f"  python -m pytest --pyargs uopkit.testing --uopkit-device={name}"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from uopkit import __version__

    parser = argparse.ArgumentParser(prog="uopkit", description="uopkit tensor compiler")
    parser.add_argument("--version", action="version", version=f"uopkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    devices = sub.add_parser("devices", help="list installed backends and whether they can run here")
    devices.add_argument("-v", "--verbose", action="store_true", help="also show each backend's description")
    devices.set_defaults(func=cmd_devices)
    new = sub.add_parser(
        "new-backend", help="write a complete, installable backend package (C via gcc) to start a new backend from"
    )
    new.add_argument("name", help="device name, e.g. MYDEV (users will write DEVICE=MYDEV)")
    new.add_argument("dir", help="folder to create (must not exist, or be empty)")
    new.set_defaults(func=cmd_new_backend)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
