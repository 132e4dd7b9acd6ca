"""Distinct names for distinct kernels: kernels compiled together into one library need them."""

from __future__ import annotations

import dataclasses
import hashlib

from uopkit.codegen import ProgramSpec
from uopkit.device import Compiled

# distinct kernels that got the same name, by (device, name): a digest of the source each was first rendered with ->
# its name (a digest, not the source: every kernel a program ever compiled has an entry here)
kernel_names: dict[tuple[str, str], dict[bytes, str]] = {}


def distinct_name(spec: ProgramSpec, dev: Compiled) -> str:
    """The name `spec`'s kernel goes by on `dev`: its own, or E_8n1, E_8n2, ... when another kernel already has its
    name and different code (remembered: the same code gets the same name again)."""
    seen = kernel_names.setdefault((dev.device, spec.name), {})
    src = spec.src.encode() if isinstance(spec.src, str) else spec.src
    digest = hashlib.sha256(src).digest()
    name = seen.get(digest)
    if name is None:
        name = seen[digest] = f"{spec.name}n{len(seen)}" if seen else spec.name
    return name


def unique_name(spec: ProgramSpec, dev: Compiled) -> ProgramSpec:
    """`spec`, renamed E_8 -> E_8n1, E_8n2, ... when another kernel already has its name and different code: kernels
    compiled together into one library (`Compiler.compile_batch`) need distinct names. The same code keeps the same
    name, so identical kernels are still compiled once, and a program names its kernels the same way every run."""
    name = distinct_name(spec, dev)
    if name == spec.name:
        return spec
    return dataclasses.replace(spec, name=name, src=dev.renderer.rename(spec.src, name, list(spec.uops)))
