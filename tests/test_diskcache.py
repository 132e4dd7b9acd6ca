"""The disk cache and host library loading: a damaged or planted cache can't crash or hijack the process.

Cases that could crash the interpreter (loading damaged libraries) run in a subprocess, so a crash fails the test
instead of killing pytest."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import warnings
import zlib
from pathlib import Path

import pytest

from uopkit import diskcache, hostlib
from uopkit.device import CompileError, Compiler

# two kernels (x+1 and x*3) through the CPU backend and the disk cache; prints results and cache counters as JSON
SCRIPT = """
import json
from uopkit import Tensor, diskcache
from uopkit.device import compile_cache_stats as s
a = (Tensor([1.0, 2.0, 3.0], device="CPU") + 1).tolist()
b = (Tensor([1.0, 2.0, 3.0], device="CPU") * 3).tolist()
print(json.dumps({"add": a, "mul": b, "hits": s.hits, "misses": s.misses, "corrupt": diskcache.stats.corrupt,
                  "refused": diskcache.stats.refused}))
"""
EXPECTED = {"add": [2.0, 3.0, 4.0], "mul": [3.0, 6.0, 9.0]}


def run_script(env: dict[str, str], code: str = SCRIPT) -> tuple[dict, str]:
    full = {k: v for k, v in os.environ.items() if k not in ("DEVICE", "CACHELEVEL", "UOPKIT_CACHE_DIR")}
    full.update(env)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)
    # a crash (SIGBUS, SIGSEGV, SIGILL) shows up here as a negative return code
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "compile").glob("*.entry"))


@pytest.fixture
def warm_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    out, _ = run_script({"UOPKIT_CACHE_DIR": str(cache)})
    assert out["misses"] == 2 and out["hits"] == 0
    # the second process takes both kernels from the cache (so the damage below is really read)
    out, _ = run_script({"UOPKIT_CACHE_DIR": str(cache)})
    assert out["hits"] == 2 and out["misses"] == 0
    assert len(entries(cache)) == 2
    return cache


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _zero_tail(data: bytes) -> bytes:
    half = len(data) // 2
    return data[:half] + bytes(len(data) - half)


def _flip(data: bytes) -> bytes:
    # flip bytes in the code, well past the header
    out = bytearray(data)
    for i in range(len(out) // 3, len(out) // 3 + 64):
        out[i] ^= 0xFF
    return bytes(out)


def _empty(data: bytes) -> bytes:
    return b""


@pytest.mark.parametrize(
    "damage", [_truncate, _zero_tail, _flip, _empty], ids=["truncated", "zeroed", "flipped", "empty"]
)
def test_damaged_entries_are_misses(warm_cache: Path, damage) -> None:  # noqa: ANN001
    for path in entries(warm_cache):
        path.write_bytes(damage(path.read_bytes()))
    out, err = run_script({"UOPKIT_CACHE_DIR": str(warm_cache)})
    assert {k: out[k] for k in EXPECTED} == EXPECTED
    assert out["hits"] == 0 and out["misses"] == 2 and out["corrupt"] == 2
    # one warning for the process, naming an entry
    assert err.count("CacheWarning") == 1 and "corrupt cache entry" in err, err
    # the entries were recompiled and overwritten: the next process hits them again
    out, err = run_script({"UOPKIT_CACHE_DIR": str(warm_cache)})
    assert out["hits"] == 2 and out["corrupt"] == 0 and "CacheWarning" not in err


def test_swapped_entries_are_misses(warm_cache: Path) -> None:
    first, second = entries(warm_cache)
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)
    second.write_bytes(a)
    out, err = run_script({"UOPKIT_CACHE_DIR": str(warm_cache)})
    # x+1 must not run x*3's kernel
    assert {k: out[k] for k in EXPECTED} == EXPECTED
    assert out["hits"] == 0 and out["corrupt"] == 2 and "belongs to another key" in err


def test_a_truncated_library_behind_a_valid_header_is_a_miss(warm_cache: Path) -> None:
    # an entry rewritten by hand with a matching digest: the header checks pass, so the library itself is checked
    # (structurally, without loading it) on a cache hit; loaded, it died with SIGBUS
    import hashlib

    for path in entries(warm_cache):
        data = path.read_bytes()
        magic, fields_line, payload = data.split(b"\n", 2)
        fields = json.loads(fields_line)
        forged = payload[: len(payload) // 3]
        fields["size"], fields["sha256"] = len(forged), hashlib.sha256(forged).hexdigest()
        path.write_bytes(magic + b"\n" + json.dumps(fields, sort_keys=True).encode() + b"\n" + forged)
    out, err = run_script({"UOPKIT_CACHE_DIR": str(warm_cache)})
    assert {k: out[k] for k in EXPECTED} == EXPECTED
    assert out["hits"] == 0 and out["misses"] == 2 and out["corrupt"] == 2
    assert err.count("CacheWarning") == 1 and "truncated" in err, err
    # recompiled and overwritten
    out, err = run_script({"UOPKIT_CACHE_DIR": str(warm_cache)})
    assert out["hits"] == 2 and out["corrupt"] == 0 and "CacheWarning" not in err


def test_old_unheadered_files_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a raw library (what the cache held before entries had headers) under an entry's name is corrupt, not code
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    diskcache.reset()
    path = diskcache.entry_path("compile", "k")
    assert path is not None
    path.parent.mkdir(mode=0o700)
    path.write_bytes(b"\x7fELF" + bytes(100))
    with pytest.warns(diskcache.CacheWarning, match="bad header"):
        assert diskcache.get("compile", "k") is None
    diskcache.put("compile", "k", b"payload")
    assert diskcache.get("compile", "k") == b"payload"
    head, _, payload = path.read_bytes().partition(b"\n")[2].partition(b"\n")
    assert payload == b"payload" and json.loads(head)["size"] == 7


# ------------------------------------------------------------------------------------------ the folder


def _refused(path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(path))
    diskcache.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert diskcache.cache_root() is None
        assert diskcache.get("compile", "k") is None
        diskcache.put("compile", "k", b"x")
    messages = [str(w.message) for w in caught if issubclass(w.category, diskcache.CacheWarning)]
    assert len(messages) == 1, messages
    assert "UOPKIT_CACHE_DIR" in messages[0] and "CACHELEVEL=0" in messages[0] and str(path) in messages[0]
    return messages[0]


def test_folder_writable_by_others_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    assert "writable by group or others (mode 777" in _refused(cache, monkeypatch)
    cache.chmod(0o770)
    assert "mode 770" in _refused(cache, monkeypatch)
    # nothing was written into it
    assert not any(cache.iterdir())


def test_folder_owned_by_someone_else_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    try:
        os.chown(cache, os.geteuid() + 4242, -1)
    except PermissionError:
        pytest.skip("changing a folder's owner needs root")
    assert f"owned by uid {os.geteuid() + 4242}, not by you" in _refused(cache, monkeypatch)


def test_parent_writable_by_others_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parent = tmp_path / "open"
    (parent / "cache").mkdir(parents=True, mode=0o700)
    parent.chmod(0o777)
    assert "writable by others and not sticky" in _refused(parent / "cache", monkeypatch)
    # a sticky folder (like /tmp) can't have its entries replaced by others: fine
    parent.chmod(0o777 | stat.S_ISVTX)
    diskcache.reset()
    assert diskcache.cache_root() == parent / "cache"


def test_uncreatable_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert "can't be created" in _refused(blocker / "cache", monkeypatch)


def test_refused_or_unwritable_cache_still_computes(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    out, err = run_script({"UOPKIT_CACHE_DIR": str(shared)})
    assert {k: out[k] for k in EXPECTED} == EXPECTED and out["refused"] == 1 and out["hits"] == 0
    assert err.count("CacheWarning") == 1 and "UOPKIT_CACHE_DIR" in err and "CACHELEVEL=0" in err
    # no writable HOME (and no XDG_CACHE_HOME): the default folder can't be created, one warning, no failure
    out, err = run_script({"HOME": "/proc/uopkit-no-home", "XDG_CACHE_HOME": ""})
    assert {k: out[k] for k in EXPECTED} == EXPECTED and out["refused"] == 1
    assert err.count("CacheWarning") == 1 and "/proc/uopkit-no-home/.cache/uopkit" in err
    # CACHELEVEL=0: no cache, no warning
    out, err = run_script({"UOPKIT_CACHE_DIR": str(shared), "CACHELEVEL": "0"})
    assert {k: out[k] for k in EXPECTED} == EXPECTED and "CacheWarning" not in err


def test_entries_and_folders_are_private(warm_cache: Path) -> None:
    assert stat.S_IMODE(os.stat(warm_cache / "compile").st_mode) == 0o700
    # no temporary files remain after atomic writes
    assert not list((warm_cache / "compile").glob(".tmp-*"))


def test_beam_results_are_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from uopkit.codegen.opt import Opt, OptOps
    from uopkit.codegen.opt.search import load_cached, store_cached

    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    diskcache.reset()
    opts = [Opt(OptOps.UPCAST, 0, 4)]
    store_cached("kernel", opts)
    assert load_cached("kernel") == opts
    path = diskcache.entry_path("beam", "kernel")
    assert path is not None
    path.write_bytes(path.read_bytes().replace(b"UPCAST", b"UNROLL"))
    with pytest.warns(diskcache.CacheWarning, match="content digest mismatch"):
        assert load_cached("kernel") is None


def test_no_pickle_in_the_core() -> None:
    import uopkit

    root = Path(uopkit.__file__).parent
    users = [p for p in root.rglob("*.py") if "import pickle" in p.read_text() or "pickle.load" in p.read_text()]
    # the one reader of pickles is the PyTorch checkpoint loader, whose unpickler resolves only an allow-list of names
    # (tests/test_torch_format.py feeds it malicious pickles); the caches never unpickle
    assert users == [root / "nn" / "torch_format.py"]
    assert "def find_class" in users[0].read_text()


def test_emulator_programs_are_json() -> None:
    # the emulator's "binaries" (cached like any other) are zlib-compressed JSON, and decode to the same UOps
    from uopkit import Tensor
    from uopkit.codegen import get_program
    from uopkit.device import Device
    from uopkit.schedule import create_schedule, kernelize_tensors
    from uopkit.testing.emulator import decode_program, encode_program

    a = Tensor([1.5, float("nan"), -0.0, 4.0], device="EMULATOR").reshape(2, 2)
    t = (a @ a).exp2().max(axis=1) + float("inf")
    item = create_schedule(kernelize_tensors([t]))[-1]
    spec = get_program(item.ast, Device["EMULATOR"].renderer)
    lib = encode_program(spec.name, list(spec.uops))
    data = json.loads(zlib.decompress(lib))
    assert data["name"] == spec.name and len(data["order"]) == len(spec.uops)
    name, uops = decode_program(lib)
    # hash-consing: the same node built again is the same object
    assert name == spec.name and all(x is y for x, y in zip(uops, spec.uops, strict=True))


# ------------------------------------------------------------------------------------------ compilers and loading


def fake_cc(folder: Path, body: str) -> list[str]:
    """A C compiler stand-in: answers --version, otherwise runs `body` (sh) with "$out" set to the -o file."""
    script = folder / "fakecc"
    script.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo "fakecc 1.0"; exit 0; fi\n'
        'out=""; prev=""; for a in "$@"; do [ "$prev" = -o ] && out="$a"; prev="$a"; done\n' + body + "\n"
    )
    script.chmod(0o755)
    return [str(script)]


ADD_SRC = "void add(float* restrict data0, const int n) { for (int i = 0; i < n; i++) data0[i] += 1.0f; }"


def _clang(cc: list[str]) -> Compiler:
    from uopkit_cpu.compiler import ClangCompiler

    return ClangCompiler(cc=cc, flags=("-shared", "-fPIC", "-O1"))


@pytest.mark.parametrize(
    "body,problem",
    [
        ('printf "garbage" > "$out"', "not an ELF file"),
        ('cc "$@" && head -c 2000 "$out" > "$out.cut" && mv "$out.cut" "$out"', "truncated"),
        (': > "$out"', "output is empty"),
    ],
    ids=["garbage", "truncated", "empty"],
)
def test_unloadable_compiler_output_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, problem: str
) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path / "cache"))
    diskcache.reset()
    compiler = _clang(fake_cc(tmp_path, body))
    with pytest.raises(CompileError, match=problem):
        compiler.compile_cached(ADD_SRC)
    assert not list((tmp_path / "cache").rglob("*.entry"))


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def test_compiler_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_COMPILE_TIMEOUT", "0.5")
    compiler = _clang(fake_cc(tmp_path, "sleep 30"))
    start = time.monotonic()
    with pytest.raises(CompileError, match="did not finish within 0.5 s") as info:
        compiler.compile(ADD_SRC)
    assert "UOPKIT_COMPILE_TIMEOUT" in str(info.value)
    # the compiler was killed, not waited for (a loose bound: only that it did not wait the 30 s)
    assert time.monotonic() - start < 25
    # and so was what it started (a driver's cc1): the whole process group
    if not Path("/proc/self").exists():
        return
    compiler = _clang(fake_cc(tmp_path, "sleep 31.25 & wait"))
    with pytest.raises(CompileError, match="did not finish"):
        compiler.compile(ADD_SRC)
    time.sleep(0.2)
    assert not [p for p in Path("/proc").glob("[0-9]*") if _cmdline(p) == "sleep 31.25"]
    monkeypatch.setenv("UOPKIT_COMPILE_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="UOPKIT_COMPILE_TIMEOUT='soon' is not a number"):
        hostlib.compile_timeout()
    monkeypatch.setenv("UOPKIT_COMPILE_TIMEOUT", "0")
    assert hostlib.compile_timeout() is None


def test_killed_compile_leaves_nothing_for_long(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cc = fake_cc(tmp_path, "sleep 60")
    code = (
        "from uopkit_cpu.compiler import ClangCompiler\n"
        f"ClangCompiler(cc={cc!r}, flags=('-shared',)).compile('int x;')\n"
    )
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(tmp.glob(f"uopkit-cc-{proc.pid}-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = list(tmp.glob(f"uopkit-cc-{proc.pid}-*"))
    assert left and (left[0] / "kernel.c").exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert left[0].exists()
    # a cache temp file of the dead process too
    cache = tmp_path / "cache"
    (cache / "compile").mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    stale = cache / "compile" / f".tmp-{proc.pid}-abc"
    stale.write_bytes(b"half")
    run_script({"UOPKIT_CACHE_DIR": str(cache), "TMPDIR": str(tmp)})
    assert not left[0].exists() and not stale.exists()


def test_libraries_load_from_a_private_copy(tmp_path: Path) -> None:
    code = (
        "import os, stat\n"
        "from uopkit import Tensor, hostlib\n"
        "assert (Tensor([1.0], device='CPU') + 1).tolist() == [2.0]\n"
        "path, fd = hostlib._lib_dirs[os.getpid()]\n"
        "st = os.fstat(fd)\n"
        "assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700, st\n"
        "assert os.listdir(path) == [], os.listdir(path)\n"
        "maps = open('/proc/self/maps').read()\n"
        "print([line for line in maps.splitlines() if path in line][:1])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, CACHELEVEL="0")
    )
    assert out.returncode == 0, out.stderr
    # the mapping is of our own file in the private folder (unlinked after loading)
    assert "uopkit-lib-" in out.stdout and "(deleted)" in out.stdout


def _mount_tmpfs(folder: Path, options: str):  # noqa: ANN202
    folder.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"can't mount a tmpfs ({options}) here (needs root): {result.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.fixture
def noexec_dir(tmp_path: Path):  # noqa: ANN201
    yield from _mount_tmpfs(tmp_path / "noexec", "noexec,size=16m,mode=1777")


@pytest.fixture
def readonly_dir(tmp_path: Path):  # noqa: ANN201
    yield from _mount_tmpfs(tmp_path / "readonly", "ro,size=1m,mode=0700")


def test_read_only_cache_runs_without_cache(readonly_dir: Path) -> None:
    # owned by us and private, but on a read-only filesystem: one warning, no cache, right answers
    out, err = run_script({"UOPKIT_CACHE_DIR": str(readonly_dir)})
    assert {k: out[k] for k in EXPECTED} == EXPECTED and out["refused"] == 1
    assert err.count("CacheWarning") == 1 and "not writable" in err and "CACHELEVEL=0" in err


def test_noexec_cache_dir_is_fine(noexec_dir: Path) -> None:
    # nothing is loaded from the cache folder itself, so a noexec one works (hits on the second run)
    cache = noexec_dir / "cache"
    run_script({"UOPKIT_CACHE_DIR": str(cache)})
    out, err = run_script({"UOPKIT_CACHE_DIR": str(cache)})
    assert {k: out[k] for k in EXPECTED} == EXPECTED and out["hits"] == 2 and "CacheWarning" not in err


def test_noexec_tmpdir_is_named(noexec_dir: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DEVICE"}
    env.update(TMPDIR=str(noexec_dir), UOPKIT_CACHE_DIR=str(tmp_path / "cache"))
    devices = subprocess.run([sys.executable, "-m", "uopkit.cli", "devices"], capture_output=True, text=True, env=env)
    assert devices.returncode == 0, devices.stderr
    cpu = next(line for line in devices.stdout.splitlines() if " CPU " in line)
    assert "unusable" in cpu and str(noexec_dir) in cpu and "noexec" in cpu
    code = "from uopkit import Tensor\nprint((Tensor([1.0], device='CPU') + 1).tolist())\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode != 0 and "mounted noexec" in run.stderr and str(noexec_dir) in run.stderr
    assert "failed to map segment" not in run.stderr


def test_in_process_compiler_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # a driver's build call (OpenCL) can't be killed: it is abandoned after UOPKIT_COMPILE_TIMEOUT
    import threading

    monkeypatch.setenv("UOPKIT_COMPILE_TIMEOUT", "0.5")
    release = threading.Event()
    try:
        with pytest.raises(CompileError, match="did not finish within 0.5 s and was abandoned"):
            hostlib.call_with_timeout(lambda: release.wait(60), "src", "fake driver")
    finally:
        release.set()
    assert hostlib.call_with_timeout(lambda: 42, "src", "fake driver") == 42
    with pytest.raises(ZeroDivisionError):
        hostlib.call_with_timeout(lambda: 1 // 0, "src", "fake driver")


# ---------------------------------------------------------------------------------------------------------------------
# the size limit


def _aged_entries(cache: Path, n: int, size: int) -> list[Path]:
    # n entries of `size` payload bytes, entry i used i hours after the first
    for i in range(n):
        diskcache.put("compile", f"key {i}", bytes([i]) * size)
    paths = [diskcache.entry_path("compile", f"key {i}") for i in range(n)]
    start = time.time() - 48 * 3600
    for i, path in enumerate(paths):
        assert path is not None and path.exists()
        os.utime(path, (start + i * 3600, start + i * 3600))
    return [p for p in paths if p is not None]


def test_a_trim_deletes_the_entries_used_longest_ago(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("UOPKIT_CACHE_MAX_MB", "0")  # (no trim while the entries are written)
    diskcache.reset()
    paths = _aged_entries(tmp_path, 10, 1000)
    each = paths[0].stat().st_size
    # under the limit: nothing goes
    assert diskcache.trim(tmp_path, 10 * each) == (0, 0)
    # a read marks its entry used: the oldest survives a trim once read
    assert diskcache.get("compile", "key 0") == bytes([0]) * 1000
    # over the limit: down to TRIM_TO of it, the entries used longest ago first
    deleted, freed = diskcache.trim(tmp_path, 9 * each)
    assert (deleted, freed) == (3, 3 * each)  # 10 -> 7 entries, 7 * each <= 0.8 * 9 * each
    assert [p.exists() for p in paths] == [True, False, False, False] + [True] * 6
    assert diskcache.get("compile", "key 9") == bytes([9]) * 1000


def test_a_write_past_the_limit_trims_in_the_background_once_per_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("UOPKIT_CACHE_MAX_MB", "0")
    diskcache.reset()
    paths = _aged_entries(tmp_path, 10, 100_000)
    # a limit of 5.5 entries; another process trimmed a minute ago: this one leaves the cache as it is
    monkeypatch.setenv("UOPKIT_CACHE_MAX_MB", str(5.5 * 100_000 / (1 << 20)))
    stamp = tmp_path / diskcache.TRIM_STAMP
    stamp.touch()
    os.utime(stamp, (time.time() - 60, time.time() - 60))
    diskcache.put("compile", "key new", b"x" * 100_000)
    assert all(p.exists() for p in paths)
    # an hour later (a new process), a write trims the oldest to 80% of the limit (4 of 12 entries stay)
    os.utime(stamp, (time.time() - diskcache.TRIM_EVERY_SECONDS - 1,) * 2)
    diskcache.reset()
    diskcache.put("compile", "key newer", b"y" * 100_000)
    for t in threading.enumerate():
        if t.name == "uopkit cache trim":
            t.join(timeout=60)
    assert sum(p.exists() for p in paths) == 2 and paths[-1].exists() and paths[-2].exists()
    assert diskcache.get("compile", "key newer") == b"y" * 100_000
    assert time.time() - stamp.stat().st_mtime < 60


def test_the_size_limit_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_MAX_MB", "0")
    assert diskcache.size_limit() is None
    monkeypatch.setenv("UOPKIT_CACHE_MAX_MB", "1.5")
    assert diskcache.size_limit() == 3 << 19
    monkeypatch.delenv("UOPKIT_CACHE_MAX_MB")
    assert diskcache.size_limit() == diskcache.CACHE_MAX_MB << 20
    monkeypatch.setenv("UOPKIT_CACHE_MAX_MB", "lots")
    diskcache.reset()
    with pytest.warns(diskcache.CacheWarning, match="UOPKIT_CACHE_MAX_MB='lots' is not a number"):
        assert diskcache.size_limit() == diskcache.CACHE_MAX_MB << 20


def test_a_trim_thread_that_cannot_start_leaves_the_write_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (a process short of threads: the entry is written, the trim is left to a later writer)
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    diskcache.reset()

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    diskcache.put("compile", "key", b"payload")
    assert diskcache.get("compile", "key") == b"payload"
