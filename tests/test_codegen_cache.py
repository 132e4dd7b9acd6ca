"""The disk cache of generated programs (`uopkit.engine.codegen_cache`): a later run takes each kernel's program from
it, byte for byte what code generation gives, and anything that changes the program is a different key."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from uopkit import Device, Tensor, diskcache
from uopkit.codegen import ProgramSpec, get_program
from uopkit.diskcache import Unkeyable, key_text
from uopkit.engine import codegen_cache, kernel_names
from uopkit.engine.codegen_cache import cached_program, program_key
from uopkit.helpers import Context
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.uop.ops import Ops, UOp

# a layer norm, a matmul, a softmax and two elementwise kernels of one shape (the second is renamed E_..n1: same name,
# other code), run in a fresh process; prints the values, the kernels' names and sources and the table's counters
SCRIPT = """
import hashlib, json
import numpy as np
from uopkit import Tensor
from uopkit.engine import codegen_cache
from uopkit.engine.realize import method_cache
import uopkit.nn.functional as F
x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6) / 7)
w = Tensor(np.linspace(-1, 1, 18, dtype=np.float32).reshape(6, 3))
out = [F.layer_norm(x, (6,)).tolist(), (x @ w).softmax(-1).tolist(), (x + 1).tolist(), (x * 3).tolist()]
kernels = sorted((r.spec.name, hashlib.sha256(r.spec.src.encode()).hexdigest()) for r in method_cache.values())
print(json.dumps({"out": out, "kernels": kernels, **codegen_cache.stats}))
"""


def run_script(cache: Path, **env: str) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("DEVICE", "CACHELEVEL", "UOPKIT_CACHE_DIR", "SPEC")}
    full.update(UOPKIT_CACHE_DIR=str(cache), **env)
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=full, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_later_run_takes_every_program_from_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = run_script(cache)
    assert first["hits"] == 0 and first["misses"] == len(first["kernels"]) >= 5
    # (two kernels of one name and different code: the renamed one has an entry of its own)
    assert any(name.endswith("n1") for name, _ in first["kernels"])
    second = run_script(cache)
    assert second["misses"] == 0 and second["hits"] == len(first["kernels"])
    assert second["kernels"] == first["kernels"] and second["out"] == first["out"]
    # without the cache the same programs
    uncached = run_script(tmp_path / "other", CACHELEVEL="0")
    assert uncached["hits"] == uncached["misses"] == 0
    assert uncached["kernels"] == first["kernels"] and uncached["out"] == first["out"]


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty cache folder, SPEC off (it bypasses the table), and no kernel names given yet in this process."""
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(kernel_names, "kernel_names", {})
    diskcache.reset()
    with Context(SPEC=0):
        yield
    diskcache.reset()


def _ast(t: Tensor) -> UOp:
    return create_schedule(kernelize_tensors([t]))[-1].ast


def _fields(spec) -> dict:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "uops"}


def test_a_hit_is_what_code_generation_gives_without_generating(fresh_cache, monkeypatch) -> None:
    dev = Device["CPU"]
    x = Tensor(np.ones((5, 7), dtype=np.float32))
    ast = _ast((x * 2).sum(axis=1).exp())
    generated = cached_program(ast, dev)
    assert _fields(generated) == _fields(get_program(ast, dev.renderer))

    def no_codegen(*args, **kwargs):
        raise AssertionError("generated the program again")

    monkeypatch.setattr(codegen_cache, "get_program", no_codegen)
    # (a new process: no kernel names given yet)
    monkeypatch.setattr(kernel_names, "kernel_names", {})
    hit = cached_program(ast, dev)
    assert _fields(hit) == _fields(generated) and hit.uops == ()


def test_a_renamed_kernel_comes_back_with_its_name_and_source(fresh_cache, monkeypatch) -> None:
    dev = Device["CPU"]
    x = Tensor(np.ones(6, dtype=np.float32))
    plus, times = _ast(x + 1), _ast(x * 3)
    first = [cached_program(plus, dev), cached_program(times, dev)]
    assert first[1].name == first[0].name + "n1" and first[1].name in first[1].src
    monkeypatch.setattr(codegen_cache, "get_program", None)
    monkeypatch.setattr(kernel_names, "kernel_names", {})
    again = [cached_program(plus, dev), cached_program(times, dev)]
    assert [_fields(s) for s in again] == [_fields(s) for s in first]


def test_what_changes_the_program_changes_the_key(fresh_cache, monkeypatch) -> None:
    dev = Device["CPU"]
    x = Tensor(np.ones((4, 64), dtype=np.float32))
    ast = _ast(x.sum(axis=1))
    key = program_key(ast, dev)
    assert key is not None and program_key(ast, dev) == key
    # another AST, even one that differs only in a constant's sign bit
    assert program_key(_ast(x.sum(axis=0)), dev) != key
    zero, negative_zero = _ast(x * 0.0), _ast(x * -0.0)
    assert zero is not negative_zero and program_key(zero, dev) != program_key(negative_zero, dev)
    # the flags and capabilities opts are chosen by
    with Context(NOOPT=1):
        assert program_key(ast, dev) not in (None, key)
    monkeypatch.setenv("UOPKIT_THREADS", "3")
    assert program_key(ast, dev) not in (None, key)
    monkeypatch.delenv("UOPKIT_THREADS")
    caps = dev.renderer.caps
    monkeypatch.setattr(dev.renderer, "caps", dataclasses.replace(caps, max_vector_width=caps.max_vector_width * 2))
    assert program_key(ast, dev) not in (None, key)
    monkeypatch.setattr(dev.renderer, "caps", caps)
    assert program_key(ast, dev) == key
    # a backend's device description beside its caps (OpenCL's cl_caps, CUDA's cuda_caps)
    monkeypatch.setattr(dev.renderer, "device_caps", ("another device",), raising=False)
    assert program_key(ast, dev) not in (None, key)
    monkeypatch.delattr(dev.renderer, "device_caps")
    assert program_key(ast, dev) == key
    # code generation that must really run
    for flags in ({"SPEC": 1}, {"BEAM": 1}, {"DEBUG": 3}):
        with Context(**flags):
            assert program_key(ast, dev) is None


def test_key_text_writes_values_exactly_and_refuses_other_types() -> None:
    assert key_text(0.0) != key_text(-0.0) and key_text(1) != key_text(1.0) != key_text(True)
    assert key_text("1") != key_text(1)
    assert key_text(frozenset({Ops.ADD, Ops.MUL})) == key_text(frozenset({Ops.MUL, Ops.ADD}))
    assert key_text((1, (2,))) != key_text(((1, 2),))
    with pytest.raises(Unkeyable):
        key_text(object())


def test_an_unreadable_entry_is_a_miss_and_is_rewritten(fresh_cache) -> None:
    dev = Device["CPU"]
    ast = _ast(Tensor(np.ones(3, dtype=np.float32)) - 2)
    key = program_key(ast, dev)
    # an intact entry (header and digests check out) whose program isn't one
    diskcache.put(codegen_cache.TABLE, key, b'{"name": "E_3"}')
    corrupt = diskcache.stats.corrupt
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = cached_program(ast, dev)
    assert diskcache.stats.corrupt == corrupt + 1 and any("unreadable program" in str(w.message) for w in caught)
    assert _fields(spec) == _fields(get_program(ast, dev.renderer))
    assert json.loads(diskcache.get(codegen_cache.TABLE, key))["src"] == spec.src


def test_a_program_of_bytes_comes_back_as_its_bytes() -> None:
    # (a renderer may return bytes, as the reference emulator's does)
    spec = ProgramSpec("E_4", bytes(range(256)), (), global_size=(4, 1, 1), estimated_flops=3)
    back = codegen_cache._from_payload(codegen_cache._to_payload(spec))
    assert back.src == spec.src and back.name == "E_4" and back.global_size == (4, 1, 1) and back.estimated_flops == 3
