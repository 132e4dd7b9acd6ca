"""The `uopkit` command line."""

from __future__ import annotations

import argparse
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
        default, default_problem = None, str(e).splitlines()[0]
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="uopkit", description="uopkit tensor compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    devices = sub.add_parser("devices", help="list installed backends and whether they can run here")
    devices.add_argument("-v", "--verbose", action="store_true", help="also show each backend's description")
    devices.set_defaults(func=cmd_devices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
