"""torch.autograd for uopkit Tensors: `grad`, `backward` and custom `Function`s.

Gradients here are lazy tensor graphs like any other value, so every gradient is differentiable again:
`create_graph=True` only decides whether the results stay attached to the graph (as torch's) or come back detached.
Graphs are never freed by a backward pass, so `retain_graph` has nothing to do.

A `Function`'s outputs are one node given its gradient directly (`uopkit.gradient.set_gradient`): the walk calls the
user's `backward` when it reaches them, and never differentiates the ops of `forward` (which runs with gradient
recording off, as torch's).

>>> from uopkit import Tensor
>>> x = Tensor([1.0, 2.0], requires_grad=True)
>>> (g,) = grad((x**3).sum(), x, create_graph=True)
>>> g.tolist(), grad(g.sum(), x)[0].tolist()
([3.0, 12.0], [6.0, 12.0])
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from uopkit.dtype import DType, dtypes
from uopkit.gradient import carry_gradient_rule, compute_gradient, given_gradient, graph_of, set_gradient
from uopkit.schedule import StaleReads, live_tensors, unrealized_graph
from uopkit.tensor.autocast import without_autocast
from uopkit.tensor.batched_backward import vjp_rows
from uopkit.tensor.grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from uopkit.tensor.leaves import gradient_key as _gradient_key
from uopkit.tensor.leaves import gradient_keys as _gradient_keys
from uopkit.tensor.leaves import reads_realized
from uopkit.tensor.leaves import requires_grad_of as _requires_grad
from uopkit.tensor.leaves import wanted_keys as _wanted_keys
from uopkit.tensor.support import _contiguous_ids, retaining_grad
from uopkit.tensor.tensor import Tensor, _gradient_hooks, _summed, _through_keys, run_post_accumulate_hooks
from uopkit.tensor.tensor_hooks import flows_on as _flows_on
from uopkit.tensor.tensor_hooks import in_rebuilt_graph as _in_rebuilt_graph
from uopkit.tensor.tensor_hooks import reaching as _reaching
from uopkit.uop.ops import Ops, UOp

__all__ = [
    "grad",
    "backward",
    "Function",
    "FunctionCtx",
    "once_differentiable",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
]


# ---------------------------------------------------------------------------------------------------------------------
# which tensors take part in autograd


def _as_tensors(x: Tensor | Sequence[Tensor], what: str) -> tuple[Tensor, ...]:
    items = (x,) if isinstance(x, Tensor) else tuple(x)
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: element {i} is a {type(t).__name__}, not a Tensor")
    return items


def _grad_outputs(grad_outputs: Any, outputs: tuple[Tensor, ...], what: str) -> tuple[Tensor | None, ...]:
    if grad_outputs is None:
        given: tuple[Tensor | None, ...] = (None,) * len(outputs)
    elif isinstance(grad_outputs, Tensor):
        given = (grad_outputs,)
    else:
        given = tuple(grad_outputs)
    if len(given) != len(outputs):
        raise RuntimeError(f"{what}: got {len(given)} gradients for {len(outputs)} outputs; give one per output")
    for o, g in zip(outputs, given, strict=True):
        if g is None and o.numel() != 1:
            raise RuntimeError(
                f"{what}: an output of shape {o.shape} has more than one element, so its gradient can't default to "
                "1; pass "
                "grad_outputs for it"
            )
        if g is not None and not isinstance(g, Tensor):
            raise TypeError(f"{what}: a gradient must be a Tensor or None, got {type(g).__name__}")
    return given


# ---------------------------------------------------------------------------------------------------------------------
# grad and backward


@without_autocast
def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple[Tensor | None, ...]:
    """The gradients of `outputs` with respect to each of `inputs`, as torch.autograd.grad; `.grad` is left alone.

    `grad_outputs`: dL/doutput per output (None: 1 for a one-element output). An input the outputs don't depend on is
    an error, None with `allow_unused`, zeros with `materialize_grads`. With `create_graph` the results can be
    differentiated again (a gradient penalty's backward reaches the weights); without it they come back detached.
    `retain_graph` is accepted and means nothing (graphs are kept). With `is_grads_batched` the first dim of each
    gradient in `grad_outputs` is a batch: the backward graph is built once and given a batch axis (torch vmaps it),
    or, where it can't be batched, one backward pass per row, the rows' results stacked.

    >>> x = Tensor([1.0, 2.0], requires_grad=True)
    >>> grad((x * x).sum(), x)[0].tolist()
    [2.0, 4.0]
    """
    if materialize_grads and allow_unused is False:
        raise ValueError(
            "grad: materialize_grads=True fills unused inputs with zeros, which contradicts allow_unused=False; leave "
            "allow_unused out (or True)"
        )
    allow_unused = bool(allow_unused) or materialize_grads
    outs, ins = _as_tensors(outputs, "grad: outputs"), _as_tensors(inputs, "grad: inputs")
    if not ins:
        raise RuntimeError("grad requires non-empty inputs.")
    if is_grads_batched:
        return _grads_batched(outs, ins, grad_outputs, create_graph, allow_unused, materialize_grads)
    given = _grad_outputs(grad_outputs, outs, "grad")
    wanted = _wanted_keys()
    for t in ins:
        if not _requires_grad(t, wanted):
            raise RuntimeError(
                f"grad: an input (shape {t.shape}) does not require grad; only tensors with requires_grad=True have "
                "gradients"
            )
    for i, o in enumerate(outs):
        if not _requires_grad(o, wanted):
            raise RuntimeError(
                f"grad: output {i} (shape {o.shape}) does not require grad, so it isn't connected to any input's graph"
            )
    keys = [_gradient_keys(t) for t in ins]
    every = {k for ks in keys for k in ks}
    # values realized since the forward pass are followed back to the graphs that computed them, as backward() does:
    # up to every tensor that requires a gradient (a weight is a leaf, whatever computed it before it was loaded)
    bounds = every | (wanted - _through_keys())
    totals: list[UOp | None] = [None] * len(ins)
    for o, g in zip(outs, given, strict=True):
        root_grad = o._root_gradient(g, "grad")
        forms: dict[UOp, UOp] = {}
        stale = StaleReads()
        root = unrealized_graph(
            o.uop, bounds, rebuilt=carry_gradient_rule, check_writes=stale, given=given_gradient, forms=forms
        )
        in_graph = graph_of(root)
        # hooks run as in backward(), torch's do in grad() too
        hooks = stale.guard(_gradient_hooks(in_graph, forms))
        early: set[UOp] = set()
        retained: list[tuple[Tensor, tuple[UOp, ...]]] = []
        if hooks or retaining_grad:
            # as torch's, only on the way to the inputs: the hooks run and the retained tensors get `.grad` there; an
            # input whose gradient flows on to another input gives it as it was before its hooks
            reach = _reaching(in_graph, every)
            hooks = {k: run for k, run in hooks.items() if k in reach}
            early = {k for k in every if k in hooks and _flows_on(k, reach)}
            for t in list(retaining_grad):
                ks = _in_rebuilt_graph(_gradient_keys(t), forms)
                if any(k in reach for k in ks):
                    retained.append((t, ks))
        targets = every | hooks.keys() | {k for _, ks in retained for k in ks}
        taken: dict[UOp, UOp] = {}
        grads = stale.checked(compute_gradient(root, root_grad.uop, targets, in_graph, hooks, taken if early else None))
        found = grads
        if early:
            found = {**grads, **stale.checked({k: g for k, g in taken.items() if k in early})}
        for i, ks in enumerate(keys):
            summed = _summed(found, ks)
            if summed is not None:
                total = totals[i]
                totals[i] = summed if total is None else total + summed
        for t, ks in retained:
            summed = _summed(grads, ks)
            if summed is not None:
                _retained_into(t, summed, create_graph)
    out: list[Tensor | None] = []
    for i, (t, total) in enumerate(zip(ins, totals, strict=True)):
        if total is not None:
            g_t = Tensor(total).cast(t.dtype)
            out.append(g_t if create_graph else g_t.detach())
        elif materialize_grads or t.numel() == 0:
            # (an empty input has its empty gradient whether or not an op kept it: cat drops empty parts)
            out.append(Tensor.zeros(t.shape, device=t.device, dtype=t.dtype))
        elif allow_unused:
            out.append(None)
        else:
            raise RuntimeError(
                f"grad: input {i} (shape {t.shape}) is not used to compute the outputs; pass allow_unused=True to "
                "get None "
                "for it (or materialize_grads=True for zeros)"
            )
    return tuple(out)


def _retained_into(t: Tensor, summed: UOp, create_graph: bool) -> None:
    # a retained tensor's gradient added into its `.grad` as backward() adds it (torch's grad() fills it too)
    g = Tensor(summed).cast(t.dtype)
    g = g if create_graph else g.detach()
    t.grad = g if t.grad is None else t.grad + g


def _grads_batched(
    outs: tuple[Tensor, ...],
    ins: tuple[Tensor, ...],
    grad_outputs: Any,
    create_graph: bool,
    allow_unused: bool,
    materialize_grads: bool,
) -> tuple[Tensor | None, ...]:
    # torch's is_grads_batched: a vmap over the first dim of every grad_output; here the backward graph given a batch
    # axis (uopkit.tensor.batched_backward), or where it can't be one backward pass per row (the rows' graphs realize
    # together when read), with torch's checks and exception types
    raw = (grad_outputs,) if grad_outputs is None or isinstance(grad_outputs, Tensor) else tuple(grad_outputs)
    for i, g in enumerate(raw):
        if g is None or (isinstance(g, Tensor) and g.ndim == 0):
            raise ValueError(
                f"grad: with is_grads_batched=True the first dim of each grad_output is the batch, but grad_output {i} "
                f"is {'None' if g is None else 'a 0-d tensor'}; give every output a gradient with a batch dim"
            )
    given = _grad_outputs(raw, outs, "grad")
    sizes = [g.shape[0] for g in given if g is not None]
    if len(set(sizes)) > 1:
        raise ValueError(f"grad: with is_grads_batched=True the grad_outputs' batch sizes differ: {sizes}")
    for i, (o, g) in enumerate(zip(outs, given, strict=True)):
        if g is not None and g.shape[1:] != o.shape:
            raise RuntimeError(
                f"grad: with is_grads_batched=True grad_output {i} of shape {g.shape} is a batch of {g.shape[1:]}, "
                f"but its output has shape {o.shape}; give it shape (batch, *{o.shape})"
            )
    if sizes[0] == 0:
        return tuple(Tensor.zeros((0, *t.shape), device=t.device, dtype=t.dtype) for t in ins)
    batched = vjp_rows(
        grad, outs, ins, lambda s, e: [g[s:e] for g in given if g is not None], sizes[0], create_graph, pad=False
    )
    if batched is not None and (allow_unused or all(b is not None for b in batched)):
        return tuple(
            b if b is not None or not materialize_grads else Tensor.zeros(t.shape, device=t.device, dtype=t.dtype)
            for b, t in zip(batched, ins, strict=True)
        )
    # (a graph that can't be batched, or an unused input's error: one backward pass per row)
    rows = [
        grad(outs, ins, [g[b] for g in given if g is not None], create_graph=create_graph, allow_unused=allow_unused)
        for b in range(sizes[0])
    ]
    out: list[Tensor | None] = []
    for i, t in enumerate(ins):
        if rows[0][i] is not None:
            out.append(Tensor.stack(*[r[i] for r in rows]))
        elif materialize_grads:
            # (unbatched, as torch's)
            out.append(Tensor.zeros(t.shape, device=t.device, dtype=t.dtype))
        else:
            out.append(None)
    return tuple(out)


def backward(
    tensors: Tensor | Sequence[Tensor],
    grad_tensors: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    grad_variables: Tensor | Sequence[Tensor | None] | None = None,
    inputs: Tensor | Sequence[Tensor] | None = None,
) -> None:
    """Add the gradients of `tensors` (with `grad_tensors`, one per tensor, None for a one-element one) into `.grad`,
    as torch.autograd.backward: `Tensor.backward` on each. With `inputs`, only those tensors' `.grad` is written.

    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> backward([(w * w).sum(), w.sum()]); w.grad.tolist()
    [3.0, 5.0]
    """
    if grad_variables is not None:
        if grad_tensors is not None:
            raise RuntimeError("backward: give grad_tensors or its old name grad_variables, not both")
        grad_tensors = grad_variables
    outs = _as_tensors(tensors, "backward: tensors")
    given = _grad_outputs(grad_tensors, outs, "backward")
    # what this Tensor.backward takes of torch's options is passed on (retain_graph means nothing here either way)
    takes = inspect.signature(Tensor.backward).parameters
    options: dict[str, Any] = {k: v for k, v in (("create_graph", create_graph),) if k in takes and v}
    if inputs is not None:
        ins = _as_tensors(inputs, "backward: inputs")
        if not ins:
            raise RuntimeError("backward: inputs must not be empty; pass None for every leaf")
        if "inputs" in takes:
            options["inputs"] = list(ins)
        else:
            _accumulate(ins, grad(outs, ins, given, create_graph=create_graph, allow_unused=True), create_graph)
            return
    for o, g in zip(outs, given, strict=True):
        o.backward(g, **options)


def _accumulate(ins: tuple[Tensor, ...], grads: tuple[Tensor | None, ...], create_graph: bool) -> None:
    # into `.grad` as Tensor.backward does: into the same tensor object where it fits, then the post-accumulate hooks
    for t, g in zip(ins, grads, strict=True):
        if g is None:
            continue
        if t.grad is None or t.grad.shape != g.shape or t.grad.dtype != g.dtype:
            t.grad = g if t.grad is None else t.grad + g
        else:
            live_tensors.set_uop(t.grad, (t.grad + g).uop)
    run_post_accumulate_hooks([t for t, g in zip(ins, grads, strict=True) if g is not None], create_graph)


# ---------------------------------------------------------------------------------------------------------------------
# custom Functions


class FunctionCtx:
    """What a `Function`'s forward hands its backward: `save_for_backward` / `saved_tensors`, any attribute set on it,
    `needs_input_grad` (one bool per forward argument), `mark_non_differentiable` and `set_materialize_grads`."""

    def __init__(self) -> None:
        self.needs_input_grad: tuple[bool, ...] = ()
        self.materialize_grads = True
        self._saved: tuple[Tensor | None, ...] = ()
        self._non_differentiable: set[int] = set()
        self._dirty: tuple[Tensor, ...] = ()
        # id(forward's output) -> how to read it back from the output node, once the node exists (a saved output
        # unpacks as the output itself, so a second derivative flows through it)
        self._output_views: dict[int, Callable[[], Tensor]] = {}

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward: takes tensors (or None), argument {i} is a {type(t).__name__}; keep other "
                    "values on ctx"
                )
        self._saved = tensors

    @property
    def saved_tensors(self) -> tuple[Tensor | None, ...]:
        out = []
        for t in self._saved:
            view = self._output_views.get(id(t)) if t is not None else None
            out.append(view() if view is not None else t)
        return tuple(out)

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        self._non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors: Tensor) -> None:
        # an in-place change of an input is the new value of that tensor here (a lazy graph): nothing to track
        self._dirty = tensors


class Function:
    """A differentiable function whose gradient you write yourself, as torch.autograd.Function: subclass it with
    `@staticmethod forward(ctx, *args)` and `@staticmethod backward(ctx, *grad_outputs)` (or `forward(*args)` plus
    `setup_context(ctx, inputs, output)`), then call `apply(*args)`.

    `backward` gets one gradient per output of forward and returns one per argument of forward (None for non-tensors
    and inputs that need none); it runs when a backward pass reaches the outputs, and what it returns is exactly the
    gradient, whatever forward computed.

    >>> class Double(Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         return x * 2
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         return g * 2
    >>> x = Tensor([1.0, 3.0], requires_grad=True)
    >>> _ = Double.apply(x).sum().backward(); x.grad.tolist()
    [2.0, 2.0]
    """

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define forward")

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        raise NotImplementedError("setup_context is not defined on this Function")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define backward (or vjp) to be differentiated")

    @staticmethod
    def vjp(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define backward (or vjp) to be differentiated")

    @staticmethod
    def jvp(ctx: Any, *grad_inputs: Any) -> Any:
        raise NotImplementedError("forward-mode gradients (jvp) are not supported")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        ctx = FunctionCtx()
        recording = is_grad_enabled()
        wanted = _wanted_keys() if recording else set()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and recording and _requires_grad(a, wanted) for a in args)
        # forward's own ops are not recorded: the gradient is backward's
        with no_grad():
            if cls.setup_context is not Function.setup_context:
                result = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, result)
            else:
                result = cls.forward(ctx, *args, **kwargs)
        if not any(ctx.needs_input_grad):
            return result
        outputs = result if isinstance(result, tuple) else (result,)
        attached = _attach_backward(cls, ctx, args, outputs)
        attached = _rebind_dirty(cls, ctx, args, outputs, attached)
        return attached if isinstance(result, tuple) else attached[0]


def _rebind_dirty(
    cls: type[Function], ctx: FunctionCtx, args: tuple[Any, ...], outputs: tuple[Any, ...], attached: tuple
) -> tuple:
    # an input forward changed in place, marked dirty and returned is the output, as torch's: the tensor object itself
    # takes the output's graph (its gradient is backward's), and `apply` returns that object. Only a lazy value (an
    # activation): one backed by storage keeps its history and the output is a tensor of its own (semantics.md)
    from uopkit.tensor.indexing import _writes_through

    results = list(attached)
    for i, o in enumerate(outputs):
        if results[i] is o or not any(o is d for d in ctx._dirty) or not any(o is a for a in args):
            continue
        if o.is_leaf and o.requires_grad:
            raise RuntimeError(
                f"{cls.__name__}.apply: a leaf Variable that requires grad has been used in an in-place operation "
                "(forward changed it and marked it dirty); pass a clone, or call it under no_grad()"
            )
        if _writes_through(o):
            continue
        o.copy_(results[i])
        results[i] = o
    return tuple(results)


def once_differentiable(backward: Callable[..., Any]) -> Callable[..., Any]:
    """torch's decorator for a backward that can't be differentiated again: it runs with gradient recording off."""

    def run(ctx: Any, *grad_outputs: Any) -> Any:
        with no_grad():
            return backward(ctx, *grad_outputs)

    run.__name__, run.__doc__ = backward.__name__, backward.__doc__
    return run


def _differentiable(ctx: FunctionCtx, o: Any) -> bool:
    return isinstance(o, Tensor) and dtypes.is_float(o.dtype) and id(o) not in ctx._non_differentiable


def _attach_backward(cls: type[Function], ctx: FunctionCtx, args: tuple[Any, ...], outputs: tuple[Any, ...]) -> tuple:
    """forward's outputs, the differentiable ones read from one new node whose gradient calls `cls.backward`."""
    diff = [i for i, o in enumerate(outputs) if _differentiable(ctx, o)]
    if not diff:
        return outputs
    devices = {outputs[i].device for i in diff}
    if len(devices) > 1:
        raise NotImplementedError(f"Function: differentiable outputs on several devices ({sorted(devices)})")
    # the inputs the gradient goes to: the tensors that need one (a tensor passed twice is listed twice)
    positions = [i for i, need in enumerate(ctx.needs_input_grad) if need]
    inputs = tuple(args[i] for i in positions)
    # several outputs are packed into one buffer (in a float dtype that holds each exactly): backward is called once,
    # with every output's gradient, when the walk reaches the packed node. (bfloat16 is held in float32: a bfloat16
    # value is differentiated through the graph of its bits, which a node of its own would not be part of)
    packed = len(diff) > 1
    packed_dtype = _widest_float([outputs[i].dtype for i in diff])
    with no_grad():
        if packed:
            value = Tensor.cat(*[outputs[i].reshape(-1).cast(packed_dtype) for i in diff])
        else:
            value = outputs[diff[0]].cast(packed_dtype)
    # every input must be a source of the node, for the walk to find it (forward may not have read one): a select
    # that always takes the value ties the missing ones in
    value = _tied(value, inputs)
    # a fresh node of its own (nodes are shared: a rule given to an equal node would be given to every use of it)
    node = UOp(Ops.CONTIGUOUS, packed_dtype, (value.uop,), ("autograd.Function", next(_contiguous_ids)))
    spans = _spans([outputs[i] for i in diff], packed)
    node_ref = weakref.ref(node)
    results = list(outputs)
    saved = {id(t) for t in ctx._saved if t is not None}
    for i, span in zip(diff, spans, strict=True):
        results[i] = _read_output(node, span)
        # a saved output unpacks as the output (the node is alive while a gradient walks it: held weakly); only a
        # saved one: the rule is the value of a weak map keyed by the node, and an output held here that reaches the
        # node (a forward returning its input as is, as backward hooks' does) would keep the entry alive for good
        if id(outputs[i]) in saved:
            ctx._output_views[id(outputs[i])] = _SavedOutput(node_ref, span, outputs[i])
    rule = _BackwardRule(cls, ctx, args, outputs, diff, spans, positions)
    # (a bfloat16 input's gradient arrives at the graph of its bits, in float32: see tensor._gradient_key)
    keys = tuple(_gradient_key(t) for t in inputs)
    set_gradient(node, keys, rule)
    return tuple(results)


# where one output lies in the node: (offset, numel, shape, dtype), offset None when the node is the output itself
Span = tuple[int | None, int, tuple[int, ...], DType]


def _spans(outputs: list[Tensor], packed: bool) -> list[Span]:
    spans: list[Span] = []
    offset = 0
    for o in outputs:
        spans.append((offset if packed else None, o.numel(), o.shape, o.dtype))
        offset += o.numel()
    return spans


def _read_output(node: UOp, span: Span) -> Tensor:
    t = Tensor(node)
    offset, n, shape, dt = span
    if offset is not None:
        t = t[offset : offset + n].reshape(shape)
    return t.cast(dt) if t.dtype != dt else t


def _widest_float(dts: list[DType]) -> DType:
    # a float dtype (not bfloat16) every one of `dts` converts to exactly
    if any(dt == dtypes.float64 for dt in dts):
        return dtypes.float64
    return dts[0] if all(dt == dts[0] for dt in dts) and dts[0] != dtypes.bfloat16 else dtypes.float32


def _tied(value: Tensor, inputs: tuple[Tensor, ...]) -> Tensor:
    in_graph = graph_of(value.uop)
    # a realized input (`h.realize()`, or stored by a realize since: also one forward's own realize stored, an index
    # check of a gather in a layer of a reversible network, so that forward's graph reads it in another form) is read
    # through forward's detached graph, where a backward's walk, which puts realized values back as the graphs that
    # computed them, doesn't look: tied in outside the detach, so the walk finds it and the rule's input follows it
    # to that graph
    realized = [t for t in inputs if t.numel() > 0 and reads_realized(t.uop)]
    missing = [t for t in inputs if t.uop not in in_graph and t.numel() > 0 and not any(t is r for r in realized)]
    if not missing and not realized:
        return value
    always = Tensor.full(value.shape, True, dtype=dtypes.bool, device=value.device)
    for t, ties in [*[(m.detach(), no_grad) for m in missing], *[(r, enable_grad) for r in realized]]:
        with ties():
            first = t.reshape(-1)[:1].to(value.device).cast(value.dtype)
            value = always.where(value, first.reshape((1,) * value.ndim).expand(value.shape))
    return value


class _SavedOutput:
    """A saved output of forward, read back from the output node while it is alive (else forward's own value)."""

    def __init__(self, node_ref: weakref.ref[UOp], span: Span, fallback: Tensor) -> None:
        self.node_ref, self.span, self.fallback = node_ref, span, fallback

    def __call__(self) -> Tensor:
        node = self.node_ref()
        return self.fallback if node is None else _read_output(node, self.span)


class _BackwardRule:
    """The given gradient of a Function's output node: the node's gradient split per output, `cls.backward` called
    once with them, its results checked and fitted to the inputs (it must not hold the node: see set_gradient)."""

    def __init__(
        self,
        cls: type[Function],
        ctx: FunctionCtx,
        args: tuple[Any, ...],
        outputs: tuple[Any, ...],
        diff: list[int],
        spans: list[Span],
        positions: list[int],
    ) -> None:
        self.cls, self.ctx, self.diff, self.spans, self.positions = cls, ctx, diff, spans, positions
        # of the inputs, only their shape, dtype and device (None for a non-tensor): the rule is the value of a weak map
        # keyed by the output's node, and an input held here can reach that node (a module's backward hooks chain
        # their calls' nodes), which would keep the entry, and every tensor it holds, alive for good
        self.arg_meta = [(a.shape, a.dtype, a.device) if isinstance(a, Tensor) else None for a in args]
        # only what the gradients of the outputs that get none need: their shape, dtype and device
        self.out_meta = [(o.shape, o.dtype, o.device) if isinstance(o, Tensor) else None for o in outputs]

    def __call__(self, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        ctx, name = self.ctx, self.cls.__name__
        with enable_grad():
            grads: list[Tensor | None] = [None] * len(self.out_meta)
            for i, meta in enumerate(self.out_meta):
                if meta is not None and ctx.materialize_grads:
                    grads[i] = Tensor.zeros(meta[0], dtype=meta[1], device=meta[2])
            for i, span in zip(self.diff, self.spans, strict=True):
                grads[i] = _read_output(g, span)
            backward = self.cls.backward if self.cls.backward is not Function.backward else self.cls.vjp
            result = backward(ctx, *grads)
        result = result if isinstance(result, tuple) else (result,)
        n = len(self.arg_meta)
        if len(result) < n or any(r is not None for r in result[n:]):
            raise RuntimeError(
                f"{name}.backward returned {len(result)} gradients for the {n} inputs of forward; return one per "
                "input (None "
                "for the ones without)"
            )
        for i, (a, r) in enumerate(zip(self.arg_meta, result, strict=False)):
            if r is not None and a is None:
                raise RuntimeError(
                    f"{name}.backward returned a gradient for forward's argument {i + 1}, which is not a tensor; "
                    "return None "
                    "there"
                )
            if r is not None and not isinstance(r, Tensor):
                raise TypeError(f"function {name}Backward returned a {type(r).__name__} at position {i + 1}")
        out: list[UOp | None] = []
        for i, w in zip(self.positions, wanted, strict=True):
            r = result[i]
            out.append(_fitted(r, self.arg_meta[i], name, i).uop if w and r is not None else None)
        return tuple(out)


def _fitted(g: Tensor, x: tuple[tuple[int, ...], Any, Any], name: str, i: int) -> Tensor:
    # a gradient of a broadcast of the input's shape is summed back to it, as torch's; the dtype and device are the
    # input's (x: its shape, dtype and device)
    shape, dtype, device = x
    if g.shape != shape:
        lead = g.ndim - len(shape)
        fits = lead >= 0 and all(s in (1, gs) for s, gs in zip(shape, g.shape[lead:], strict=True))
        if not fits:
            raise RuntimeError(
                f"{name}.backward: the gradient for argument {i} has shape {g.shape}, which does not sum down to the "
                f"argument's shape {shape}"
            )
        if lead:
            g = g.sum(tuple(range(lead)))
        axes = tuple(d for d, (s, gs) in enumerate(zip(shape, g.shape, strict=True)) if s != gs)
        if axes:
            g = g.sum(axes, keepdim=True)
    if g.device != device:
        g = g.to(device)
    dt = dtypes.float32 if dtype == dtypes.bfloat16 else dtype
    return g.cast(dt) if g.dtype != dt else g
