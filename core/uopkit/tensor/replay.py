"""Elementwise methods built from many tensor ops (tanh, gelu, erf, clip, ...) record their graph once per input
signature and rebuild it over each new input.

Eager code pays for a graph in Python, op by op: a tanh is ~90 nodes, 400 us of Python per call on a 16x16 tensor,
where the kernel takes microseconds. A rebuild is ~1 us a node: the nodes that depend on the input, made again over it.

A recording runs the method on a stand-in for the input (a BUFFER nobody allocates, of the input's shape, dtype and
device), keeps the nodes that depend on it, sources first, and the gradient rules the method gave some of them
(`set_gradient`). A replay builds those nodes over the real input and gives the new nodes the same rules, replayed
too: a rule's result is recorded once per incoming gradient's signature, over the stand-ins and one for the gradient,
and rebuilt over the real ones (with the rules of its own nodes: second derivatives).

Only methods whose graph depends on nothing but the input's signature (shape, dtype, device) and their scalar arguments
are `replayed`: no random numbers, no reads of the data, no in-place writes. A recording that fails, returns a view or
reaches a buffer other than the stand-in's is not kept: that call and later ones run the method itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uopkit.dtype import DType, dtypes
from uopkit.gradient import GradientRule, given_gradient, set_gradient
from uopkit.tensor.autocast import replay_key as autocast_replay_key
from uopkit.tensor.grad_mode import thread_mode
from uopkit.uop.ops import Ops, UOp, const_identity, with_shape

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# recorded graphs kept at most (the oldest go first); a signature seen again after that is recorded again
MAX_TEMPLATES = 2048
# nodes a template may not hold: what reads or writes memory other than the input, or runs a kernel
_REFUSED = frozenset({Ops.BUFFER, Ops.STORE, Ops.KERNEL, Ops.COPY, Ops.DEFINE_VAR})
_SCALARS = (bool, int, float, str, type(None), DType)


@dataclass
class _Template:
    stand_ins: tuple[UOp, ...]
    # the nodes over the stand-ins, sources first: (op, dtype, sources, arg, shape), a source an int (an index into the
    # inputs, then the nodes built before it) or a node that doesn't depend on the stand-ins; the shape as recorded
    # (the inputs' shapes are the key's, so each node's is too)
    program: tuple[tuple[Ops, DType, tuple[Any, ...], Any, tuple[int, ...] | None], ...]
    # the roots: as sources above, or None (a gradient rule's input it gives no gradient)
    results: tuple[Any, ...]
    # gradient rules given to nodes of the program: (the node's index, its inputs as sources above, the rule)
    rules: tuple[tuple[int, tuple[Any, ...], GradientRule], ...]
    # whether the function returned a tuple of tensors (`replay_call`)
    several: bool = False


# (method, signature, arguments) -> _Template, or None where the method can't be replayed
_templates: dict[tuple, _Template | None] = {}
# (recorded rule, its stand-ins, the incoming gradient's signature, which inputs want one) -> _Template or None
_rule_templates: dict[tuple, _Template | None] = {}


def replayed(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """`fn(self, *scalars)`, an elementwise method of one tensor, built by replaying its recorded graph (see the
    module docstring). Other arguments (tensors, lists) and bfloat16 inputs (whose casts give gradient rules to
    nodes outside the method's graph) run the method itself."""

    @functools.wraps(fn)
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return _call(fn, (self,), args, kwargs, several=False)

    return method


def replay_call(fn: Callable[..., Any], tensors: tuple[Tensor, ...], *args: Any, **kwargs: Any) -> Any:
    """`fn(*tensors, *args, **kwargs)`, a tensor or a tuple of them, built by replaying its graph recorded once per
    signature of `tensors` and value of the scalar arguments: for a function of several tensors under the conditions
    `replayed` methods meet, called over and over on its own results (a step of a factorization's loop over the
    columns, an exchange of a sorting network: `solve` of a 100x100 matrix built its 9000 nodes op by op in ~110 ms,
    ~12 us a node). Its results must be new values, not views; a CONTIGUOUS, whose arg is fresh per call, is the
    caller's."""
    return _call(fn, tensors, args, kwargs, several=True)


def _call(
    fn: Callable[..., Any], tensors: tuple[Tensor, ...], args: tuple, kwargs: dict[str, Any], several: bool
) -> Any:
    # `several`: a tuple of tensors may be returned (not by a method: its tuple results run the method itself)
    uops = tuple([t.uop for t in tensors])
    key = _key(fn, uops, args, kwargs, thread_mode.off)
    if key is None:
        return fn(*tensors, *args, **kwargs)
    template = _templates.get(key, _templates)
    if template is _templates:
        template = _keep(_templates, key, _record(fn, uops, args, kwargs, several))
    if template is None:
        return fn(*tensors, *args, **kwargs)
    built = _rebuild(template, uops)
    if template.several:
        return tuple([Tensor(u) for u in built])
    return Tensor(built[0])


def _key(
    fn: Callable[..., Any], uops: tuple[UOp, ...], args: tuple, kwargs: dict[str, Any], no_grad: bool
) -> tuple | None:
    if any(u.dtype == dtypes.bfloat16 for u in uops):
        return None
    for a in (*args, *kwargs.values()):
        if type(a) not in _SCALARS and not (type(a) is tuple and all(type(i) is int for i in a)):
            return None
    # (1, 1.0 and True are equal keys and 0.0 and -0.0 too, but build other graphs: each is keyed with its type, and
    # floats as const nodes are)
    scalars = tuple((type(a), const_identity(a)) for a in args)
    named = tuple(sorted((k, type(a), const_identity(a)) for k, a in kwargs.items())) if kwargs else ()
    # (under no_grad the method's result is cut from the gradient: a graph recorded there has a DETACH a replay with
    # gradients on must not have)
    # (and an autocast block's casts are nodes of the graph too)
    casts = autocast_replay_key()
    signature = tuple((u.dtype, u.shape, u.device) for u in uops)
    return (fn, signature, dtypes.default_float, dtypes.default_int, no_grad, casts, scalars, named)


def _stand_in(dtype: DType, shape: tuple[int, ...], device: str) -> UOp:
    # a BUFFER nobody allocates, shaped as the value it stands for
    size = 1
    for s in shape:
        size *= s
    buf = UOp.new_buffer(device, size, dtype)
    return buf if buf.shape == shape else UOp(Ops.RESHAPE, dtype, (buf,), shape)


def _keep(table: dict[tuple, _Template | None], key: tuple, template: _Template | None) -> _Template | None:
    while table and len(table) >= MAX_TEMPLATES:
        table.pop(next(iter(table)))
    if MAX_TEMPLATES > 0:
        table[key] = template
    return template


def _record(
    fn: Callable[..., Any], uops: tuple[UOp, ...], args: tuple, kwargs: dict[str, Any], several: bool
) -> _Template | None:
    stand_ins = []
    for u in uops:
        shape = u.shape
        assert shape is not None
        stand_ins.append(_stand_in(u.dtype, shape, u.device))
    try:
        out = fn(*(Tensor(s) for s in stand_ins), *args, **kwargs)
    except Exception:  # noqa: BLE001 - the method itself runs next and raises its error where it was called
        return None
    several = several and type(out) is tuple
    outs = out if several else (out,)
    if not outs or any(type(o) is not Tensor or o._view_of is not None or o.uop in stand_ins for o in outs):
        return None
    template = _compile(tuple(o.uop for o in outs), tuple(stand_ins))
    if template is not None:
        template.several = several
    return template


def _compile(
    roots: tuple[UOp | None, ...], stand_ins: tuple[UOp, ...], refused: frozenset[Ops] = _REFUSED
) -> _Template | None:
    # the nodes of `roots` that depend on the stand-ins, as a program; None where the graph holds a `refused` op (a
    # method's graph: a buffer other than the stand-in's, or anything that runs) or reads a stand-in's BUFFER other
    # than through its RESHAPE
    buffers = {s.src[0] for s in stand_ins if s.op is Ops.RESHAPE}
    index: dict[UOp, int] = {s: i for i, s in enumerate(stand_ins)}
    program = []
    rules = []
    for root in roots:
        if root is None:
            continue
        for n in root.toposort():
            if n in index or n in buffers:
                continue
            if n.op in refused or any(s in buffers for s in n.src):
                return None
            if not any(s in index for s in n.src):
                continue
            index[n] = len(index)
            program.append((n.op, n.dtype, tuple(index.get(s, s) for s in n.src), n.arg, n.shape))
            given = given_gradient(n)
            if given is not None:
                inputs, rule = given
                rules.append((index[n], tuple(index.get(i, i) for i in inputs), rule))
    results = tuple(None if r is None else index.get(r, r) for r in roots)
    return _Template(stand_ins, tuple(program), results, tuple(rules))


def _rebuild(t: _Template, inputs: tuple[UOp, ...]) -> tuple[UOp | None, ...]:
    built = list(inputs)
    for op, dtype, srcs, arg, shape in t.program:
        # (given its recorded shape: asked for it, each new node would otherwise walk down to nodes that know theirs)
        built.append(with_shape(UOp(op, dtype, tuple([built[s] if type(s) is int else s for s in srcs]), arg), shape))
    if t.rules:
        over = dict(zip(t.stand_ins, inputs, strict=True))
        for i, rule_inputs, rule in t.rules:
            new_inputs = tuple([built[s] if type(s) is int else s for s in rule_inputs])
            set_gradient(built[i], new_inputs, _replayed_rule(rule, over))
    return tuple(built[r] if type(r) is int else r for r in t.results)


def _replayed_rule(rule: GradientRule, over: dict[UOp, UOp]) -> GradientRule:
    # the recorded rule, its result recorded once per incoming gradient's signature (over a stand-in for the gradient
    # and the stand-ins of `over`, which its nodes hang from) and rebuilt over the real ones; a node of the result
    # given a gradient rule passes it on, replayed too (a derivative's own derivative: abs's is sign(x), whose
    # gradient is the zero its rule gives). Nodes the rule holds that don't depend on the stand-ins (a constant table
    # a derivative reads) stay as they are
    stand_ins = tuple(over)
    values = tuple(over.values())

    def replay(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        shape = g.shape
        assert shape is not None
        key = (rule, stand_ins, g.dtype, shape, g.device, wanted)
        template = _rule_templates.get(key, _rule_templates)
        if template is _rule_templates:
            g_stand_in = _stand_in(g.dtype, shape, g.device)
            results = tuple(rule(g_stand_in, wanted))
            template = _keep(_rule_templates, key, _compile(results, (*stand_ins, g_stand_in), frozenset()))
        # (a method whose gradient reads its input's storage apart from its value, a bfloat16's bits, isn't replayed)
        assert template is not None, "replay: a recorded gradient rule reads a stand-in's BUFFER directly"
        return _rebuild(template, (*values, g))

    return replay
