"""BEAM search over kernel opts: compile and time candidates on the device, keep the best `width` each round.

The result for a (kernel, device) pair is cached on disk, so the second run with BEAM=n is instant. The heuristic's
opts are one of the candidates, and the final pick times the heuristic against the best few again, in turns: the
search only replaces the default with something measurably faster.

No candidate wins without being checked: the search runs on random inputs, the unoptimized kernel once first, and a
candidate whose outputs differ from it (`verify.output_error` beyond the dtype's tolerance) is dropped (DEBUG>=2
prints its opts and error), so neither the pick nor the cache ever holds a wrong opt list.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from uopkit import diskcache
from uopkit.codegen.opt import KernelPlan, Opt, OptError, OptOps, apply_opt, apply_opts, initial_plan
from uopkit.helpers import DEBUG, cpu_threads
from uopkit.renderer import Renderer
from uopkit.uop.ops import GroupOp, Ops, UOp

UPCAST_AMOUNTS = (2, 3, 4, 8, 16, 32)
UNROLL_AMOUNTS = (2, 4, 8)
LOCAL_AMOUNTS = (2, 4, 8, 16, 32, 64)
GROUP_AMOUNTS = (16, 32, 64, 128, 256)
# reduce elements per stage loop of a step staged in local memory (times any UNROLL inside it)
STAGE_AMOUNTS = (2, 4, 8, 16)
MAX_ROUNDS = 6
TIMING_RUNS = 3
# candidates slower than this many times the best so far get one timing run only
CUTOFF = 2.0
# the final pick: the fastest few and the heuristic are timed again, in turns, this many rounds; the heuristic
# stays unless another is faster by more than MARGIN (one timing run's noise must not replace it)
FINALISTS = 3
FINAL_ROUNDS = 7
MARGIN = 0.05
# part of every cache key: a search that works differently (since 2: candidates verified) starts a new cache
CACHE_VERSION = "beam 2"


def ast_key(ast: UOp, renderer: Renderer) -> str:
    """A stable key for a kernel on a device: its AST written out in order, the renderer and its settings."""
    nodes = list(ast.toposort())
    index = {u: i for i, u in enumerate(nodes)}
    # CACHE_VERSION: entries of searches that did not verify their candidates are never read; "opts v2": what opts
    # mean (OptOps.THREAD splits its amount off the loop since v2)
    # (the caps as `key_text` writes them: their repr lists sets of ops in an order that changes between processes)
    caps = diskcache.key_text(renderer.caps)
    text = [CACHE_VERSION, f"{type(renderer).__module__}.{type(renderer).__name__}", caps, "opts v2"]
    for u in nodes:
        text.append(f"{u.op.name}|{u.dtype!r}|{u.arg!r}|{[index[s] for s in u.src]}")
    return hashlib.sha256("\n".join(text).encode()).hexdigest()


def _applies(ast: UOp, opts: list[Opt], renderer: Renderer) -> bool:
    # a cached pick is used only while the renderer still accepts it: its limits may have changed, and a result found
    # with another thread count may split a loop that THREAD can't split here (then: search again)
    try:
        apply_opts(ast, opts, renderer)
    except OptError:
        return False
    return True


def load_cached(key: str) -> list[Opt] | None:
    """The opts a previous search chose for `key` (from the disk cache, verified), or None."""
    data = diskcache.get("beam", key)
    if data is None:
        return None
    try:
        return [Opt(OptOps[op], axis, amt) for op, axis, amt in json.loads(data)]
    except (ValueError, KeyError, TypeError):
        return None


def store_cached(key: str, opts: list[Opt]) -> None:
    diskcache.put("beam", key, json.dumps([[o.op.name, o.axis, o.amount] for o in opts]).encode())


def candidate_actions(plan: KernelPlan, renderer: Renderer) -> list[Opt]:
    actions: list[Opt] = []
    n_axes = plan.n_out + len(plan.red)
    for axis in range(n_axes):
        if not any(p.kind == "loop" and p.size > 1 for p in plan.axis_parts(axis)):
            continue
        actions += [Opt(OptOps.UPCAST, axis, a) for a in UPCAST_AMOUNTS]
        if axis >= plan.n_out:
            actions += [Opt(OptOps.UNROLL, axis, a) for a in UNROLL_AMOUNTS]
            if renderer.caps.has_local and renderer.caps.has_shared:
                actions += [Opt(op, axis, a) for op in (OptOps.GROUP, OptOps.GROUPTOP) for a in GROUP_AMOUNTS]
                actions += [Opt(OptOps.STAGE, axis, a) for a in STAGE_AMOUNTS]
        else:
            if renderer.caps.has_threads:
                # the whole loop among the threads, or one block per thread
                actions += [Opt(OptOps.THREAD, axis, a) for a in dict.fromkeys((0, cpu_threads()))]
            if renderer.caps.has_local:
                actions += [Opt(OptOps.LOCAL, axis, a) for a in LOCAL_AMOUNTS]
    # the loop order of each pair of output axes (CPU-style renderers: a GPU grid has none)
    if not renderer.caps.has_local:
        actions += [Opt(OptOps.SWAP, a, b) for a in range(plan.n_out) for b in range(a + 1, plan.n_out)]
    # each tensor core the renderer declares, on each reduce axis (apply_opt keeps the ones the kernel fits)
    if plan.tc is None and plan.red:
        tc_count = len(renderer.caps.tensor_cores)
        actions += [Opt(OptOps.TC, plan.n_out + r, i) for r in range(len(plan.red)) for i in range(tc_count)]
    valid = []
    for a in actions:
        try:
            apply_opt(plan, a, renderer)
        except OptError:
            continue
        valid.append(a)
    return valid


# builds a kernel's program with given opts: `uopkit.codegen.get_program`, passed in because the pipeline is the layer
# that calls the search (importing it here would be a cycle)
ProgramBuilder = Callable[[UOp, Renderer, list[Opt]], Any]


class CandidateMismatch(Exception):
    """A candidate computed something else than the unoptimized kernel on the search inputs (`error`: how far off,
    see `verify.output_error`)."""

    def __init__(self, message: str, error: float) -> None:
        super().__init__(message)
        self.error = error


class Timer:
    """Compiles (with `build`, normally `uopkit.codegen.get_program`) and times one kernel with given opts on scratch
    buffers of the device, after checking each candidate's output against the unoptimized kernel's.

    The scratch buffers hold random values (`verify.search_inputs`, seeded): `reference()` runs the unoptimized
    kernel once and keeps what it stores; a candidate runs once on the same inputs (the buffers it writes restored
    first, so it neither sees another's results nor reads its own earlier writes when it updates in place) and is
    timed only when its outputs match, else it is out (infinitely slow) for the whole search.
    """

    def __init__(self, ast: UOp, device: str, build: ProgramBuilder) -> None:
        import numpy as np

        from uopkit.codegen.opt.verify import search_inputs
        from uopkit.device import Buffer, Device

        self.ast, self.device, self.build = ast, device, build
        self.dev = Device[device]
        globals_ = sorted({u.arg: u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}.items())
        self.dtypes = [u.dtype.base for _, u in globals_]
        # scratch buffers: timing never touches the user's data
        self.bufs = [Buffer(device, max(u.dtype.size, 1), u.dtype.base).allocate() for _, u in globals_]
        rng = np.random.default_rng(0)
        self.initial = [search_inputs(b.dtype, b.size, rng) for b in self.bufs]
        for b, data in zip(self.bufs, self.initial, strict=True):
            b.copyin(data)
        # the buffers the kernel stores to (its outputs, which may also be inputs when it updates in place)
        self.args = [arg for arg, _ in globals_]
        self.written = sorted({self.args.index(_stored_buffer(st).arg) for st in ast.src if st.op is Ops.STORE})
        self.expected: list[Any] | None = None
        self.fastest = math.inf
        # built programs by opts: timing the same candidate again (the final pick) doesn't rebuild it
        self.built: dict[tuple[Opt, ...], tuple[Any, Any]] = {}
        # candidates whose outputs differ from the unoptimized kernel's, with the largest error; those that failed
        self.rejected: dict[tuple[Opt, ...], float] = {}
        self.failed: set[tuple[Opt, ...]] = set()

    def _run_once(self, spec: Any, prg: Any) -> list[Any]:
        """Run on the search inputs (written buffers restored first); returns the written buffers' values."""
        from uopkit.codegen.opt.verify import as_values

        for i in self.written:
            self.bufs[i].copyin(self.initial[i])
        prg(
            *[b.opaque for b in spec.take(self.bufs)],
            global_size=spec.global_size,
            local_size=spec.local_size,
            vals=spec.least_values(),
            wait=True,
        )
        out = []
        for i in self.written:
            raw = memoryview(bytearray(self.bufs[i].nbytes))
            self.bufs[i].copyout(raw)
            out.append(as_values(raw, self.dtypes[i]).copy())
        return out

    def _program(self, opts: list[Opt]) -> tuple[Any, Any]:
        if tuple(opts) not in self.built:
            spec = self.build(self.ast, self.dev.renderer, list(opts))
            lib = self.dev.compiler.compile(spec.src)
            self.built[tuple(opts)] = (spec, self.dev.runtime(spec.name, lib))
        return self.built[tuple(opts)]

    def reference(self) -> None:
        """Run the unoptimized kernel once on the search inputs and keep its outputs (raises when it can't run)."""
        self.expected = self._run_once(*self._program([]))

    def verify(self, opts: list[Opt], spec: Any, prg: Any) -> None:
        from uopkit.codegen.opt.verify import output_error, tolerance

        assert self.expected is not None, "Timer.reference() runs first"
        for i, got, ref in zip(self.written, self._run_once(spec, prg), self.expected, strict=True):
            err = output_error(got, ref)
            if err > tolerance(self.dtypes[i], opts, self.dev.renderer):
                message = f"data{self.args[i]} differs from the unoptimized kernel's by {err:.3g} (max error)"
                raise CandidateMismatch(message, err)

    def __call__(self, opts: list[Opt]) -> float:
        key = tuple(opts)
        if key in self.rejected or key in self.failed:
            return math.inf
        try:
            verified = key in self.built
            spec, prg = self._program(opts)
            if not verified and self.expected is not None:
                self.verify(opts, spec, prg)
            args = [b.opaque for b in spec.take(self.bufs)]
            vals = spec.least_values()
            best = math.inf
            for _ in range(TIMING_RUNS):
                t = prg(*args, global_size=spec.global_size, local_size=spec.local_size, vals=vals, wait=True)
                best = min(best, t if t is not None else math.inf)
                # a candidate far slower than the best so far is out: don't spend more runs on it
                if best > CUTOFF * self.fastest:
                    break
            self.fastest = min(self.fastest, best)
            return best
        except CandidateMismatch as e:
            self.rejected[key] = e.error
            if DEBUG >= 2:
                print(f"BEAM: dropped {list(opts)}: {e}", file=sys.stderr)
            return math.inf
        except Exception as e:  # noqa: BLE001 - a candidate that fails to build or run is just not chosen
            self.built.pop(key, None)
            self.failed.add(key)
            if DEBUG >= 3:
                print(f"BEAM: {opts} failed: {type(e).__name__}: {e}", file=sys.stderr)
            return math.inf


def _stored_buffer(store: UOp) -> UOp:
    # a kernel STORE writes a view of a DEFINE_GLOBAL
    node = store.src[0]
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node


def _progress(label: str, done: int, total: int, best: float) -> None:
    if not sys.stderr.isatty() and DEBUG < 1:
        return
    width = 30
    filled = int(width * done / max(total, 1))
    bar = "#" * filled + "-" * (width - filled)
    sys.stderr.write(f"\r{label} [{bar}] {done}/{total} best {best * 1e6:9.2f} us")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _beam(scored: dict[tuple[Opt, ...], float], width: int) -> list[tuple[tuple[Opt, ...], float]]:
    # the `width` fastest that ran (the heuristic often has no room left to grow: the runner-up is where the search
    # finds other tile shapes)
    return [kv for kv in sorted(scored.items(), key=lambda kv: kv[1])[:width] if kv[1] < math.inf]


def final_pick(
    scored: dict[tuple[Opt, ...], float], heuristic: list[Opt], timer: Callable[[list[Opt]], float]
) -> tuple[Opt, ...]:
    """The fastest few candidates and the heuristic, timed again in turns (so slow drifts of the machine hit them
    alike); the heuristic unless another is faster by more than MARGIN. Only candidates that ran (and matched the
    unoptimized kernel) take part; with none, the unoptimized kernel itself: ()."""
    ranked = [c for c, t in sorted(scored.items(), key=lambda kv: kv[1])[:FINALISTS] if t < math.inf]
    ran_heuristic = scored.get(tuple(heuristic), math.inf) < math.inf
    finalists = list(dict.fromkeys([tuple(heuristic)] * ran_heuristic + ranked))
    if len(finalists) <= 1:
        return finalists[0] if finalists else ()
    best_time = dict.fromkeys(finalists, math.inf)
    for _ in range(FINAL_ROUNDS):
        for c in finalists:
            best_time[c] = min(best_time[c], timer(list(c)))
    winner = min(finalists, key=lambda c: best_time[c])
    if ran_heuristic and best_time[tuple(heuristic)] <= (1 + MARGIN) * best_time[winner]:
        return tuple(heuristic)
    return winner


def beam_search(
    ast: UOp,
    renderer: Renderer,
    width: int,
    device: str | None = None,
    timer: Callable[[list[Opt]], float] | None = None,
    build: ProgramBuilder | None = None,
) -> list[Opt]:
    """The best opts found by a beam search of `width`, cached on disk per (kernel, renderer). Candidates are timed by
    `timer`, else by a `Timer` on `device` that builds them with `build` (`uopkit.codegen.get_program`)."""
    from uopkit.codegen.opt.heuristic import hand_coded_opts

    key = ast_key(ast, renderer)
    cached = load_cached(key)
    if cached is not None and _applies(ast, cached, renderer):
        return cached
    heuristic = hand_coded_opts(ast, renderer)
    if timer is None:
        from uopkit.device import Device

        if build is None:
            raise ValueError("beam_search needs `timer` or `build` (uopkit.codegen.get_program) to time candidates")
        timer = Timer(ast, device or renderer.device or Device.DEFAULT, build)
        try:
            timer.reference()
        except Exception as e:  # noqa: BLE001 - without a reference no candidate can be checked: keep the heuristic
            print(
                f"BEAM: the unoptimized kernel failed ({type(e).__name__}: {e}); keeping {heuristic}", file=sys.stderr
            )
            return heuristic
    start = time.perf_counter()
    # seeds: the heuristic (timed first, so candidates much slower than it are cut short) and its shorter prefixes;
    # not the bare kernel, whose single run can take longer than the whole search should
    scored: dict[tuple[Opt, ...], float] = {tuple(heuristic): timer(heuristic)}
    for k in range(1, len(heuristic)):
        scored.setdefault(tuple(heuristic[:k]), timer(heuristic[:k]))
    if not heuristic:
        scored[()] = timer([])
    beam = _beam(scored, width)
    for round_i in range(MAX_ROUNDS):
        if not beam:
            break
        candidates: list[tuple[Opt, ...]] = []
        # the first round grows every seed: the heuristic's full tile often has no room left (lane limit), its
        # shorter prefixes are where other tile shapes and unrolls start
        for opts, _ in beam if round_i else [kv for kv in scored.items() if kv[1] < math.inf]:
            plan = initial_plan(ast)
            for o in opts:
                plan = apply_opt(plan, o, renderer)
            for action in candidate_actions(plan, renderer):
                cand = opts + (action,)
                if cand not in scored and cand not in candidates:
                    candidates.append(cand)
        if not candidates:
            break
        best_before = beam[0][1]
        for i, cand in enumerate(candidates):
            scored[cand] = timer(list(cand))
            _progress(f"BEAM round {round_i + 1}", i + 1, len(candidates), min(scored.values()))
        beam = _beam(scored, width)
        if beam[0][1] >= best_before:
            break
    best = list(final_pick(scored, heuristic, timer))
    if DEBUG >= 2:
        dropped = len(timer.rejected) if isinstance(timer, Timer) else 0
        took = time.perf_counter() - start
        print(f"BEAM: {len(scored)} candidates ({dropped} dropped: wrong output) in {took:.1f} s -> {best}")
    store_cached(key, best)
    return best
