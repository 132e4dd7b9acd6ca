"""THE codegen pipeline: a kernel AST in, a rendered program out. Each step is one named graph rewrite."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from uopkit.codegen.expander import expand
from uopkit.codegen.linearizer import LinearizeError, linearize
from uopkit.codegen.lowerer import lower_kernel
from uopkit.codegen.merge import merge_axes
from uopkit.codegen.opt import KernelPlan, Opt, apply_opts
from uopkit.codegen.scatter import lower_scatter_kernel
from uopkit.codegen.transcendental import decompositions_for, exp_rules
from uopkit.dtype import index_dtype
from uopkit.helpers import DEBUG, NOOPT, SPEC
from uopkit.renderer import Renderer
from uopkit.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from uopkit.uop.symbolic import pm_symbolic

T = TypeVar("T")


@dataclass(frozen=True)
class ProgramSpec:
    """A rendered kernel: its name, source (what the renderer returned: str, or bytes), the linear UOps it came from
    and its launch parameters."""

    name: str
    src: str | bytes
    uops: tuple[UOp, ...]
    global_size: tuple[int, int, int] = (1, 1, 1)
    local_size: tuple[int, int, int] | None = None
    vars: tuple[UOp, ...] = ()
    estimated_flops: int = 0
    estimated_bytes: int = 0
    opts: tuple[Opt, ...] = ()
    # the kernel's buffers (by their DEFINE_GLOBAL numbers in the AST, the order of `ScheduleItem.bufs`) the program
    # takes, in order: those its code reads or writes (`drop_unused_params`); None: every one
    params: tuple[int, ...] | None = None

    def take(self, bufs: Sequence[T]) -> list[T]:
        """The program's arguments out of the kernel's buffers (`ScheduleItem.bufs` order): the ones `params` keeps."""
        params = self.params
        return list(bufs) if params is None else [bufs[i] for i in params]

    def launch_values(self, values: dict[str, int]) -> tuple[int, ...]:
        """The `vals` a launch passes: each of `vars` (DEFINE_VARs, sorted by name) given by name in `values`."""
        if not self.vars:
            return ()
        missing = [v.arg[0] for v in self.vars if v.arg[0] not in values]
        if missing:
            raise ValueError(f"kernel {self.name} needs launch values for {', '.join(missing)}, got {sorted(values)}")
        return tuple(values[v.arg[0]] for v in self.vars)

    def least_values(self) -> tuple[int, ...]:
        """Launch values with every variable at its minimum (a kernel run on scratch buffers: search, fuzzing)."""
        return tuple(v.arg[1] for v in self.vars)


def do_ungate_load(x: UOp, buf: UOp, idx: UOp, gate: UOp) -> UOp | None:
    # a gated load gives 0 where its gate is false, and doesn't read there: when its address (simplified knowing the
    # gate holds) is inside the buffer for every value of its loops, it reads unconditionally and a select gives the 0.
    # Same values, no branch: a padded BatchNorm + ReLU read its per-channel values under the pad's test, each a
    # conditional load, and gcc left the loop scalar
    size = getattr(buf.dtype, "size", -1)
    if size <= 0 or buf.dtype.local or not 0 <= idx.vmin or not idx.vmax < size or x.dtype.count != 1:
        return None
    return gate.where(x.replace(src=(UOp(Ops.INDEX, x.src[0].dtype, (buf, idx)), *x.src[1:])), x.const_like(0))


pm_ungate_loads = PatternMatcher(
    [
        (
            UPat(
                Ops.LOAD,
                src=(UPat(Ops.INDEX, src=(UPat(Ops.DEFINE_GLOBAL, name="buf"), UPat.var("idx"), UPat.var("gate"))),),
                name="x",
                allow_any_len=True,
            ),
            do_ungate_load,
        )
    ]
)


def may_fire(pm: PatternMatcher, ops: set[Ops]) -> bool:
    """Whether a rule of `pm` can fire in a graph whose nodes' ops are `ops`: a rule's node has one of its pattern's
    ops and sources of its source patterns' ops, all in the graph. A pass that can't is not walked (most kernels have
    no exp, no log: their passes changed nothing, in a walk of the whole kernel each)."""
    if pm.any_op:
        return True
    for op, rules in pm.pdict.items():
        if op in ops and any(all(not ops.isdisjoint(src) for _, src in pat._src_ops) for pat, _, _ in rules):
            return True
    return False


def kernel_name(ast: UOp) -> str:
    """E_<shape> for elementwise kernels, r_<shape> for kernels with a reduce."""
    store = ast.src[0]
    shape = store.src[1].shape or ()
    has_reduce = any(u.op is Ops.REDUCE_AXIS for u in ast.toposort())
    dims = "_".join(str(s) for s in shape) or "1"
    return f"{'r' if has_reduce else 'E'}_{dims}"


def full_rewrite(ast: UOp, renderer: Renderer, plan: KernelPlan | None = None) -> tuple[list[UOp], dict]:
    """Kernel AST -> linear program (and its launch dimensions)."""
    # views become index arithmetic over RANGE loops (or GPU ids); reduces become DEFINE_REG accumulators
    vector_width = renderer.caps.max_vector_width if renderer.caps.vector_ops else 1
    # (a GPU-style kernel gets no reduce-value reuse: its row reduces run in kernels of their own)
    gpu = renderer.caps.has_local
    # (a scatter kernel without opts: its writes one by one, `scatter`)
    scattered = lower_scatter_kernel(ast, plan, gpu)
    if scattered is not None:
        lowered, lctx = scattered
    else:
        # (a CPU-style kernel adds each output in one running loop: its long float sums add in blocks; a GPU's long
        # reduces are work-group trees)
        lowered, lctx = lower_kernel(
            ast, plan, gpu=gpu, vector_width=vector_width, reuse_reduce_values=not gpu, cascade_sums=not gpu
        )
    # everything after lowering builds index arithmetic of the type lowering chose for this kernel
    with index_dtype(lctx.index_dtype):
        # e**x gets its accurate form while the code is still scalar
        ops = {u.op for u in lowered.toposort()}
        if may_fire(exp := exp_rules(), ops):
            lowered = graph_rewrite(lowered, exp, name="exp")
            ops = {u.op for u in lowered.toposort()}
        # transcendental ops the renderer lacks become polynomials and bit operations, before lanes are expanded: each
        # of their ops then runs on whole vectors where the renderer has it (a log decomposed after expanding had
        # every lane's polynomial written out)
        decompose = decompositions_for(renderer.caps.transcendental_ops)
        if decompose is not None and may_fire(decompose, ops):
            lowered = graph_rewrite(lowered, decompose, name="transcendentals")
        # fold the index arithmetic once while lanes are still ranges: the views' div/mod chains mostly fold away here,
        # an address that no longer depends on a lane is not copied per lane, and the pass after expanding has a
        # fraction of the nodes to fold (the main job's kernels: 39k nodes after expanding without it)
        # (one cache for every symbolic rewrite of the kernel: most nodes the later ones see, the pass after expanding
        # and the expander's look at addresses, are this pass's results, already simplified; a rewrite is a function of
        # the node alone, so a node's cached result is what rewriting it again would give)
        symbolic_cache: dict[UOp, UOp] = {}
        lowered = graph_rewrite(lowered, pm_symbolic, name="symbolic (before expanding)", cache=symbolic_cache)
        lowered = graph_rewrite(lowered, pm_ungate_loads, name="ungate loads in bounds")
        # UPCAST/UNROLL lanes become one copy of the code per lane (or one vector op, for a vector lane)
        caps = renderer.caps
        expanded = expand(
            lowered, caps.vector_ops, caps.vector_align, symbolic_cache, caps.vector_casts, caps.vector_mask_bytes
        )
        # fold constants and simplify the index arithmetic the views produced
        simplified = graph_rewrite(expanded, pm_symbolic, name="symbolic", cache=symbolic_cache)
        # the backend's own rules (decompositions of ops it lacks, ...)
        if renderer.extra_matcher is not None:
            simplified = graph_rewrite(simplified, renderer.extra_matcher, name="backend rules")
        # order the graph into loops and statements
        uops = linearize(simplified, branch_selected_updates=not gpu)
    uops, params = drop_unused_params(uops, ast)
    if SPEC:
        from uopkit.uop.spec import verify_program

        verify_program(uops)
    if DEBUG >= 6:
        for i, u in enumerate(uops):
            print(f"{i:4d} {u.op.name:14s} {u.dtype!s:16s} {u.arg!r}")
    dims = {"global": tuple(lctx.global_dims), "local": tuple(lctx.local_dims), "params": params}
    return uops, dims


def drop_unused_params(uops: list[UOp], ast: UOp) -> tuple[list[UOp], tuple[int, ...]]:
    """The linear program without the parameters of buffers its code no longer touches, and the kernel buffers it
    takes (`ProgramSpec.params`).

    A buffer read only where the simplified code can't go (a `where` whose branch folded away, a load of a padding
    the view never reaches) leaves the kernel's code, but not its AST: its parameter would stay, and two kernels
    differing only in such a buffer would be two sources, each compiled. The buffers left are numbered 0, 1, ... in
    their order; a buffer the kernel stores to keeps its parameter even if no store of it is left."""
    used = {u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL}
    # (the kernel's outputs, the buffers its STOREs write: one whose store is gone still takes its parameter)
    outputs = [g for st in ast.src if st.op is Ops.STORE and (g := _stored_global(st)).op is Ops.DEFINE_GLOBAL]
    lost = sorted({g.arg: g for g in outputs if g.arg not in used}.values(), key=lambda u: u.arg)
    uops = lost + uops
    params = tuple(sorted(used | {g.arg for g in lost}))
    if params == tuple(range(len(params))):
        return uops, params
    number = {arg: i for i, arg in enumerate(params)}
    renamed: dict[UOp, UOp] = {}
    out = []
    for u in uops:
        src = tuple(renamed.get(s, s) for s in u.src)
        if u.op is Ops.DEFINE_GLOBAL:
            new = u.replace(arg=number[u.arg])
        elif src != u.src:
            new = u.replace(src=src)
        else:
            new = u
        if new is not u:
            renamed[u] = new
        out.append(new)
    return out, params


def _stored_global(store: UOp) -> UOp:
    # a kernel STORE writes a view of a DEFINE_GLOBAL
    node = store.src[0]
    while node.src and node.op is not Ops.DEFINE_GLOBAL:
        node = node.src[0]
    return node


def _launch_dims(dims: tuple[int, ...]) -> tuple[int, int, int]:
    return tuple(list(dims) + [1] * (3 - len(dims)))  # type: ignore[return-value]


def choose_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    """The opts a kernel gets: none with NOOPT=1, a cached BEAM search with BEAM=n, else the heuristic."""
    if NOOPT:
        return []
    from uopkit.helpers import BEAM

    if BEAM >= 1:
        from uopkit.codegen.opt.search import beam_search

        return beam_search(ast, renderer, BEAM.value, build=get_program)
    from uopkit.codegen.opt.heuristic import hand_coded_opts

    return hand_coded_opts(ast, renderer)


def do_sum_without_padding(red: UOp, pad: UOp) -> UOp | None:
    # padding adds zeros: a sum over padded axes is the sum over what was padded (a view padded to 10**12 elements
    # would otherwise loop 10**12 times)
    op, axes = red.arg
    if op is not Ops.ADD or any(p != (0, 0) for i, p in enumerate(pad.arg) if i not in axes):
        return None
    return UOp(Ops.REDUCE_AXIS, red.dtype, (pad.src[0],), red.arg)


pm_sum_of_padding = PatternMatcher(
    [(UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.PAD, name="pad"),), name="red"), do_sum_without_padding)]
)


def prepare_ast(ast: UOp) -> UOp:
    """The kernel AST that opts are planned on and applied to (a sum over padding no longer loops over it): opts
    chosen for a kernel outside `get_program` must be drawn on this form."""
    if not may_fire(pm_sum_of_padding, {u.op for u in ast.toposort()}):
        return ast
    return graph_rewrite(ast, pm_sum_of_padding, name="sum of padding")


def get_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None, name: str | None = None) -> ProgramSpec:
    """Kernel AST -> rendered ProgramSpec, with `opts` (default: chosen by `choose_opts` for the AST with its adjacent
    axes merged where every view allows, `merge.merge_axes`; given opts are for the AST's own axes)."""
    ast = prepare_ast(ast)
    if SPEC:
        from uopkit.uop.spec import verify_kernel_ast

        verify_kernel_ast(ast)
    if DEBUG >= 5:
        print(ast)
    chosen = opts is None
    if opts is None:
        # fewer, longer loops where the views allow (opts given by the caller are for the kernel's own axes)
        ast = merge_axes(ast)
        opts = choose_opts(ast, renderer)
    plan = apply_opts(ast, opts, renderer)
    if DEBUG >= 3:
        print(f"opts: {list(plan.opts)}")
    try:
        uops, dims = full_rewrite(ast, renderer, plan)
    except LinearizeError as e:
        if not chosen or not plan.opts:
            raise
        # a program must not fail for want of a faster kernel: the heuristic's opts are a choice, and the kernel
        # without them is always correct (explicit opts, BEAM's or a test's, still raise)
        if DEBUG >= 1:
            print(f"opts {list(plan.opts)} don't linearize ({e}); compiling the kernel without opts")
        plan = apply_opts(ast, [], renderer)
        uops, dims = full_rewrite(ast, renderer, plan)
    name = name or kernel_name(ast)
    src = renderer.render(name, uops)
    flops, nbytes = estimate_cost(ast)
    variables = tuple(sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0]))
    return ProgramSpec(
        name,
        src,
        tuple(uops),
        global_size=_launch_dims(dims["global"]),
        local_size=_launch_dims(dims["local"]) if dims["local"] else None,
        vars=variables,
        estimated_flops=flops,
        estimated_bytes=nbytes,
        opts=tuple(plan.opts),
        params=dims["params"],
    )


def estimate_cost(ast: UOp) -> tuple[int, int]:
    """Rough FLOPs (ALU ops times elements they run over) and bytes moved, for DEBUG=2."""
    from uopkit.uop.ops import GroupOp

    flops = 0
    nbytes = 0
    for u in ast.toposort():
        if u.op in GroupOp.ALU and u.shape is not None:
            flops += u.size
        if u.op is Ops.REDUCE_AXIS and u.src[0].shape is not None:
            flops += u.src[0].size
        if u.op is Ops.DEFINE_GLOBAL:
            nbytes += u.dtype.size * u.dtype.itemsize
    return flops, nbytes
