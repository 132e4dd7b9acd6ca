"""Linear algebra (dot, matmul, einsum) and convolution/pooling (a mixin of `Tensor`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import (
    DType,
    dtypes,
    least_upper_dtype,
)
from uopkit.helpers import prod
from uopkit.schedule.grouper import is_realized_view
from uopkit.tensor.autocast import CPU, FLOAT32, LOWER, autocast_op, without_autocast
from uopkit.tensor.complex_tensor import ComplexTensor, complex_einsum
from uopkit.tensor.einsum import ComplexOperands, einsum_subscripts
from uopkit.tensor.resample import (
    UnsupportedRankError,
    antialias_table,
    clamped_cubic_table,
    cubic_taps,
    fixed_point,
    linear_source_positions,
    repeated_progression,
)
from uopkit.tensor.support import (
    ArgumentError,
    ShapeError,
    UnsupportedDTypeError,
    _as_key,
    _broadcast_shape,
    _check_same_device,
    _conv_pads,
    _einsum_diagonal,
    _movement_recipe,
    _positive_n,
    _reading_input,
    _returns_copy,
    _sum_acc_dtype,
    _tuple_n,
    _window_recipes,
    in_float32,
)
from uopkit.uop.ops import Ops, UOp, replay_movement

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


# a transposed convolution with more output phases (stride ** dims) than this computes each in a kernel of its own
MAX_FUSED_PHASES = 4


class _UnpoolIndexError(IndexError, RuntimeError):
    """An index of max_unpool outside its output: PyTorch raises RuntimeError there, uopkit's range checks
    IndexError."""


class LinalgMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # linear algebra

    @autocast_op(LOWER)
    def dot(self, w: Tensor) -> Tensor:
        """Matrix product with numpy/PyTorch broadcasting of the batch dims.

        >>> Tensor([[1, 2], [3, 4]]).dot(Tensor([1, 1])).tolist()
        [3, 7]
        """
        acc, out_dt = self._product_accumulator(w)
        return acc.cast(out_dt)

    def _product_accumulator(self, w: Tensor) -> tuple[Tensor, DType]:
        """`dot`'s sums before they are rounded to the result's dtype, and that dtype: half floats' products are summed
        in float32, where torch's add*mm family and linear add the bias before the one rounding."""
        if not isinstance(w, Tensor):
            raise TypeError(f"matmul: the right operand must be a Tensor, got {type(w).__name__}")
        _check_same_device("matmul", (self, w))
        fast = _matrix_product_uop(self.uop, w.uop)
        if fast is not None:
            return Tensor(fast), fast.dtype
        if self.ndim == 0 or w.ndim == 0:
            raise ShapeError(f"matmul: both operands need at least 1 dimension, got {self.shape} and {w.shape}")
        if self.ndim > 2 and w.ndim == 2 and self.shape[-1] == w.shape[0] > 0:
            # a layer over a batch of sequences, (..., n, k) @ (k, m): one matrix product over all the rows, whose
            # weight gradient x.T @ g is one reduce over every row of the batch in w's layout (as a batched product
            # it is a sum over two axes, stored transposed)
            rows = self.reshape((prod(self.shape[:-1]), self.shape[-1]))
            acc, out_dt = rows._product_accumulator(w)
            return acc.reshape(self.shape[:-1] + (w.shape[1],)), out_dt
        x = self
        x_vec, w_vec = x.ndim == 1, w.ndim == 1
        x = x.reshape((1, x.shape[0])) if x_vec else x
        w = w.reshape((w.shape[0], 1)) if w_vec else w
        if x.shape[-1] != w.shape[-2]:
            raise ShapeError(f"matmul: inner dimensions differ: {self.shape} @ {w.shape}")
        n, k, m = x.shape[-2], x.shape[-1], w.shape[-1]
        batch = _broadcast_shape(x.shape[:-2], w.shape[:-2], "matmul")
        out_dt = least_upper_dtype(x.dtype, w.dtype)
        if out_dt == dtypes.bool:
            raise UnsupportedDTypeError(
                "matmul: a product of two bool tensors isn't defined (as PyTorch); cast them with .int() first"
            )
        mul_dt = _product_dtype(out_dt)
        xb = x.cast(mul_dt).reshape(x.shape[:-2] + (n, 1, k))._broadcast_to(batch + (n, m, k))
        # (the scheduler may store a large row-major w in panels for the device: schedule/packing.py)
        wt = w.cast(mul_dt).transpose(-1, -2).reshape(w.shape[:-2] + (1, m, k))
        wb = wt._broadcast_to(batch + (n, m, k))
        out = (xb * wb).sum(axis=-1, dtype=_sum_acc_dtype(out_dt))
        out = out.squeeze(-2) if x_vec else out
        return (out.squeeze(-1) if w_vec else out), out_dt

    def matmul(self, x: Tensor, reverse: bool = False) -> Tensor:
        """Matrix product (self @ x).

        >>> (Tensor([[1, 0], [0, 1]]) @ Tensor([[2], [3]])).tolist()
        [[2], [3]]
        """
        if not isinstance(x, Tensor):
            if isinstance(x, ComplexTensor):
                return x._with_real(self, "matmul", reverse)  # (a complex product)
            raise TypeError(f"matmul: the other operand must be a Tensor, got {type(x).__name__}")
        return x.dot(self) if reverse else self.dot(x)

    @autocast_op(LOWER)
    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """self @ weight + bias with weight of shape (in, out) as in tinygrad (a 1-D weight scales elementwise).

        >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0], [1.0]]), Tensor([0.5])).tolist()
        [[3.5]]
        """
        _check_same_device("linear", [t for t in (self, weight, bias) if isinstance(t, Tensor)])
        if weight.ndim == 1:
            x = self * weight
            return x + bias if bias is not None else x
        return self._product_plus(weight, bias)

    def _product_plus(self, weight: Tensor, bias: Tensor | None) -> Tensor:
        """self @ weight + bias. Half floats add a bias of their dtype to the float32 sums and round once, as
        torch's CPU linear and addmm (the product rounded first, then the sum, differs in a quarter of the elements)."""
        acc, out_dt = self._product_accumulator(weight)
        if bias is None:
            return acc.cast(out_dt)
        if out_dt in dtypes.halves and acc.dtype is not out_dt and isinstance(bias, Tensor) and bias.dtype is out_dt:
            return (acc + bias.cast(acc.dtype)).cast(out_dt)
        return acc.cast(out_dt) + bias

    @autocast_op(LOWER)
    @staticmethod
    def einsum(formula: str | Tensor, *operands: Any) -> Tensor:
        """Einstein summation, e.g. "ij,jk->ik"; "..." broadcasts, a letter repeated in one operand takes the
        diagonal, and without "->" the output is the letters used once, sorted. torch's sublist form too:
        einsum(a, [0, 1], b, [1, 2], [0, 2]) is "AB,BC->AC" (0-25 are A-Z, 26-51 a-z; the output list optional).

        >>> Tensor.einsum("ij,j->i", Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
        [3, 7]
        """
        try:
            operands, specs, out, formula = einsum_subscripts(formula, operands)
        except ComplexOperands as e:  # (a sum of real einsums of the parts)
            return complex_einsum(e.formula, e.operands)  # type: ignore[return-value]
        sizes: dict[str, int] = {}
        prepared = []
        for s, t in zip(specs, operands, strict=True):
            t, s = _einsum_diagonal(t, s)
            for c, n in zip(s, t.shape, strict=True):
                if c in sizes and n != sizes[c] and 1 not in (n, sizes[c]):
                    raise ShapeError(f"einsum: letter {c!r} has sizes {sizes[c]} and {n} in {formula!r}")
                sizes[c] = max(sizes.get(c, 1), n) if n != 0 and sizes.get(c, 1) != 0 else 0
            prepared.append((t, s))
        letters = sorted(sizes, key=lambda c: (c not in out, out.index(c) if c in out else 0, c))
        if any(c not in sizes for c in out):
            raise ArgumentError(f"einsum: output letter not in any input of {formula!r}")
        total: Tensor | None = None
        out_dt = least_upper_dtype(*(t.dtype for t, _ in prepared))
        for t, s in prepared:
            aligned = t.cast(_product_dtype(out_dt)).permute([s.index(c) for c in letters if c in s])
            shape = tuple(t.shape[s.index(c)] if c in s else 1 for c in letters)
            aligned = aligned.reshape(shape)
            total = aligned if total is None else total * aligned
        assert total is not None
        total = total._broadcast_to(tuple(sizes[c] for c in letters))
        summed = tuple(i for i, c in enumerate(letters) if c not in out)
        if len(prepared) == 1 and summed and not dtypes.is_float(out_dt):
            # one operand summed is a sum, with sum's dtype (bools and small ints count in int32), as torch's
            return total.sum(summed)
        return (total.sum(summed) if summed else total).cast(out_dt)

    def outer(self, other: Tensor) -> Tensor:
        """The outer product of two 1-D tensors: out[i, j] = self[i] * other[j] (torch.outer).

        >>> Tensor([1, 2]).outer(Tensor([1, 10])).tolist()
        [[1, 10], [2, 20]]
        """
        if not isinstance(other, Tensor):
            raise TypeError(f"outer: the other operand must be a Tensor, got {type(other).__name__}")
        if self.ndim != 1 or other.ndim != 1:
            raise ShapeError(f"outer: needs two 1-D tensors, got shapes {self.shape} and {other.shape}")
        return self.reshape(-1, 1) * other.reshape(1, -1)

    @autocast_op(FLOAT32, CPU)
    def trace(self) -> Tensor:
        """The sum of a matrix's main diagonal (of min(rows, columns) elements), accumulated as sum (torch.trace).

        >>> Tensor([[1, 2], [3, 4]]).trace().tolist()
        5
        """
        if self.ndim != 2:
            raise ShapeError(f"trace: needs a matrix (2-D), got shape {self.shape}")
        return self.diagonal().sum()

    # ------------------------------------------------------------------------------------------------------------
    # convolution and pooling: windows are movement ops over the input (no copies), then a multiply-reduce

    def _pool(
        self,
        k_: Sequence[int],
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        gradient_by_taps: bool = False,
    ) -> Tensor:
        """Windows over the last len(k_) axes: shape (..., *out, *k_), out[o][j] = x[o * stride + j * dilation].
        `gradient_by_taps`: overlapping windows of a few taps (a pool's) give their gradient as one sum of a slice per
        tap (`_set_windows_gradient`); long windows (a cumulative sum's, one tap per element) keep the chain of the
        movement ops' rules, which is faster there."""
        n = len(k_)
        if self.ndim < n:
            raise ShapeError(f"pool: kernel {tuple(k_)} has more dims than the input shape {self.shape}")
        s_, d_ = _positive_n(stride, n, "stride", "pool"), _positive_n(dilation, n, "dilation", "pool")
        lead = self.ndim - n
        x = self
        tail: list[tuple[str, int]] = [("in", i) for i in range(n)]
        for i in range(n):
            pos = lead + tail.index(("in", i))
            x = x.permute([a for a in range(x.ndim) if a != pos] + [pos])
            tail.remove(("in", i))
            x = x._pool1d(k_[i], s_[i], d_[i])
            tail += [("out", i), ("k", i)]
        final = [("out", i) for i in range(n)] + [("k", i) for i in range(n)]
        ret = x.permute(list(range(lead)) + [lead + tail.index(lbl) for lbl in final])
        overlapping = any(d > 1 or k > s for k, s, d in zip(k_, s_, d_, strict=True))
        if gradient_by_taps and overlapping and prod(k_) <= MAX_GIVEN_WINDOW_TAPS:
            _set_windows_gradient(ret.uop, self.uop, tuple(k_), s_, d_)
        return ret

    def _windows(self, pads: tuple, ks: tuple[int, ...], stride: Any, dilation: Any) -> Tensor:
        """self.pad(pads)._pool(ks, stride, dilation), replaying the movement ops worked out once per shape."""
        key = (self.shape, self.dtype, tuple(pads), tuple(ks), _as_key(stride), _as_key(dilation))
        recipe = _window_recipes.get(key)
        if recipe is None:
            # a stand-in of the same shape (never allocated): the recipe depends on shapes only
            buf = UOp.new_buffer(self.device, max(self.numel(), 1), self.dtype)
            probe = Tensor(UOp(Ops.RESHAPE, self.dtype, (buf,), self.shape))
            recipe = _movement_recipe(probe.pad(pads)._pool(ks, stride, dilation).uop, probe.uop)
            if len(_window_recipes) >= 256:
                _window_recipes.clear()
            _window_recipes[key] = recipe
        return Tensor(replay_movement(self.uop, recipe))

    def _pool1d(self, k: int, s: int, d: int, wrapped: int | None = None) -> Tensor:
        # windows of the last axis as (..., o, k). Repeat the axis e times and read the flat result in rows of
        # R = m*L + d: element (j, i*s) of that grid is at flat j*R + i*s, i.e. x[(j*d + i*s) mod L] = x[j*d + i*s].
        # `wrapped` asks for that many windows, taps past the end reading x[(j*d + i*s) mod L] (the caller masks them)
        lead, L = self.shape[:-1], self.shape[-1]
        o = (L - d * (k - 1) - 1) // s + 1 if wrapped is None else wrapped
        if o <= 0 or k <= 0:
            raise ShapeError(f"pool: kernel {k} (dilation {d}) doesn't fit an axis of size {L}")
        if d == 1 and k <= s and wrapped is None:
            # windows that don't overlap (max_pool2d(2)): rows of s, the first k of each. Plain strides, so the kernels
            # (and the gradient, a pad) index without the division and modulo the general case below needs
            fit = ((0, 0),) * len(lead) + ((0, o * s - L),)
            x = self.pad(fit) if o * s > L else self._slice_axis(len(lead), 0, o * s)
            return x._reshaped(lead + (o, s))._slice_axis(len(lead) + 1, 0, k)
        m = max(1, math.ceil((o * s - d) / L))
        R = m * L + d
        e = math.ceil(k * R / L)
        x = self.unsqueeze(-2).expand(lead + (e, L))._reshaped(lead + (e * L,))
        x = x._slice_axis(len(lead), 0, k * R)._reshaped(lead + (k, R))
        x = x._slice_axis(len(lead) + 1, 0, o * s)._reshaped(lead + (k, o, s))
        x = x._slice_axis(len(lead) + 2, 0, 1)._reshaped(lead + (k, o))
        return x.transpose(-1, -2)

    @autocast_op(LOWER)
    def conv2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: int | Sequence[int] = 1,
        padding: int | str | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
    ) -> Tensor:
        """N-d convolution (cross-correlation) of (N, C_in, *spatial) or unbatched (C_in, *spatial) with weight
        (C_out, C_in/groups, *kernel); the arguments in torch.nn.functional.conv2d's order (tinygrad's puts groups
        third: pass them by name to be safe with both).

        padding: an int, one int per spatial dim, 2 ints per spatial dim (tinygrad order: last dim first, as
        PyTorch's F.pad), "valid" or "same" (stride 1, as PyTorch).

        >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
        [[[[4.0, 4.0], [4.0, 4.0]]]]
        """
        if not isinstance(weight, Tensor):
            raise TypeError("conv2d: weight must be a Tensor")
        nd = weight.ndim - 2
        if nd >= 1 and self.ndim == nd + 1:
            # an unbatched input, as PyTorch takes it
            return self.unsqueeze(0).conv2d(weight, bias, stride, padding, dilation, groups).squeeze(0)
        if nd < 1 or self.ndim != nd + 2:
            raise ShapeError(f"conv: input {self.shape} and weight {weight.shape} need N+2 and N+2 dims (N >= 1)")
        (bs, cin_), (cout, cin), ks = self.shape[:2], weight.shape[:2], weight.shape[2:]
        if groups < 1 or cin_ != groups * cin:
            raise ShapeError(
                f"conv: input {self.shape} has {cin_} channels but weight {weight.shape} with groups={groups} "
                f"expects {groups * cin}"
            )
        if cout % groups:
            raise ShapeError(f"conv: {cout} output channels of weight {weight.shape} don't split into {groups} groups")
        if bias is not None and bias.shape != (cout,):
            raise ShapeError(f"conv: bias shape {bias.shape} should be ({cout},)")
        # (errors name the op by its dimensions: conv1d and conv3d come here too)
        op = f"conv{nd}d"
        s_ = _positive_n(stride, nd, "stride", op)
        d_ = _positive_n(dilation, nd, "dilation", op)
        if padding == "same" and any(s != 1 for s in s_):
            raise ArgumentError(f"{op}: padding='same' needs stride 1, got stride {stride!r} (as PyTorch)")
        pads = _conv_pads(padding, nd, ks, d_, op)
        for L, k, d, (pb, pa) in zip(self.shape[2:], ks, d_, pads, strict=True):
            if L + pb + pa < d * (k - 1) + 1:
                raise ShapeError(
                    f"{op}: kernel {ks} (dilation {d_}) is larger than the padded input {self.shape} (padding {pads})"
                )
        padded = any(p for pair in pads for p in pair) or any(n.op is Ops.PAD for n in self.uop.movement_chain())
        if cout // groups > 1 and not padded and not is_realized_view(self.uop):
            # every output channel reads each input element, and so does the weight's gradient: a computed input (a
            # residual block's BatchNorms, sum and ReLU before a 1x1 shortcut conv) would be computed again inside both
            # kernels, per output channel. Stored first (a padded input is: its padded copy is a kernel of its own)
            self = self.contiguous()
        windows = self._windows(((0, 0), (0, 0)) + pads, ks, s_, d_)
        out_sp = windows.shape[2 : 2 + nd]
        rcout = cout // groups
        out_dt = least_upper_dtype(self.dtype, weight.dtype)
        mul_dt = _product_dtype(out_dt)
        # (the library's own reshapes, views by construction: `_reshaped` skips the user-facing checks)
        x = windows.cast(mul_dt)._reshaped((bs, groups, 1, cin) + out_sp + ks)
        w = weight.cast(mul_dt)._reshaped((1, groups, rcout, cin) + (1,) * nd + ks)
        prod_ = x._broadcast_to((bs, groups, rcout, cin) + out_sp + ks) * w._broadcast_to(
            (bs, groups, rcout, cin) + out_sp + ks
        )
        reduce_axes = (3,) + tuple(range(4 + nd, 4 + 2 * nd))
        acc = prod_.sum(reduce_axes, dtype=_sum_acc_dtype(out_dt))._reshaped((bs, cout) + out_sp)
        if bias is not None and out_dt in dtypes.halves and acc.dtype is not out_dt and bias.dtype is out_dt:
            # a half convolution adds its bias to the float32 sums and rounds once, as torch's (bfloat16 under CPU
            # autocast; rounded first, then added, a third of the outputs were a unit in the last place off)
            ret = (acc + bias.cast(acc.dtype).reshape((1, cout) + (1,) * nd)).cast(out_dt)
            _set_conv_gradient(ret.uop, self.uop, weight.uop, x.uop, groups, s_, d_, pads, bias.uop)
            return ret
        ret = acc.cast(out_dt)
        _set_conv_gradient(ret.uop, self.uop, weight.uop, x.uop, groups, s_, d_, pads)
        return ret if bias is None else ret + bias.cast(out_dt).reshape((1, cout) + (1,) * nd)

    def conv1d(self, weight: Tensor, bias: Tensor | None = None, *args: Any, **kwargs: Any) -> Tensor:
        """1-d convolution of (N, C, L) (or unbatched); see conv2d."""
        if self.ndim not in (2, 3) or weight.ndim != 3:
            raise ShapeError(f"conv1d: needs a 3-d input and weight, got {self.shape} and {weight.shape}")
        return self.conv2d(weight, bias, *args, **kwargs)

    def conv3d(self, weight: Tensor, bias: Tensor | None = None, *args: Any, **kwargs: Any) -> Tensor:
        """3-d convolution of (N, C, D, H, W) (or unbatched); see conv2d."""
        if self.ndim not in (4, 5) or weight.ndim != 5:
            raise ShapeError(f"conv3d: needs a 5-d input and weight, got {self.shape} and {weight.shape}")
        return self.conv2d(weight, bias, *args, **kwargs)

    @autocast_op(LOWER)
    def conv_transpose2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        dilation: int | Sequence[int] = 1,
    ) -> Tensor:
        """Transposed convolution with weight (C_in, C_out/groups, *kernel), as torch's conv_transpose2d (its
        arguments in torch's order; an unbatched (C_in, *spatial) input too).

        >>> Tensor.ones(1, 1, 2, 2).conv_transpose2d(Tensor.ones(1, 1, 2, 2)).shape
        (1, 1, 3, 3)
        """
        nd = weight.ndim - 2
        if nd >= 1 and self.ndim == nd + 1:
            batched = self.unsqueeze(0)
            return batched.conv_transpose2d(weight, bias, stride, padding, output_padding, groups, dilation).squeeze(0)
        if nd < 1 or self.ndim != nd + 2:
            raise ShapeError(f"conv_transpose: input {self.shape} and weight {weight.shape} need N+2 dims each")
        cin, ks = weight.shape[0], weight.shape[2:]
        if self.shape[1] != cin or cin % groups:
            raise ShapeError(
                f"conv_transpose: input {self.shape} has {self.shape[1]} channels, weight {weight.shape} expects {cin} "
                f"(groups={groups})"
            )
        s_, d_ = (
            _positive_n(stride, nd, "stride", "conv_transpose2d"),
            _positive_n(dilation, nd, "dilation", "conv_transpose2d"),
        )
        p_, op_ = _tuple_n(padding, nd, "padding"), _tuple_n(output_padding, nd, "output_padding")
        if any(v < 0 for v in p_ + op_):
            raise ArgumentError(
                "conv_transpose2d: padding and output_padding must not be negative, "
                f"got {padding!r} and {output_padding!r}"
            )
        if any(o >= max(s, d) for o, s, d in zip(op_, s_, d_, strict=True)):
            # (it would only add rows no input reaches; torch refuses it too)
            raise ArgumentError(
                f"conv_transpose2d: output_padding {output_padding!r} must be smaller than the stride {stride!r} or "
                f"the dilation {dilation!r}"
            )
        pads = tuple((d * (k - 1) - p, d * (k - 1) - p + o) for k, d, p, o in zip(ks, d_, p_, op_, strict=True))
        if all(s == 1 for s in s_):
            return self._transposed_conv(weight, groups, s_, d_, pads, bias)
        x, w, out_dt = self, weight, least_upper_dtype(self.dtype, weight.dtype)
        if out_dt in dtypes.halves:
            # computed in float32 (its products exact there, as a half convolution's own) and rounded once, after the
            # bias is added to the sums, as torch's (added after the rounding: 25-30% of bfloat16 outputs were a unit
            # in the last place off)
            x, w = self.cast(dtypes.float32), weight.cast(dtypes.float32)
            bias = None if bias is None else bias.cast(out_dt).cast(dtypes.float32)
        out = _with_adjoint_gradient(x._transposed_conv(w, groups, s_, d_, pads), x, w, s_, d_, p_, groups)
        if bias is not None:
            out = out + bias.cast(out.dtype).reshape((1, out.shape[1]) + (1,) * nd)
        return out.cast(out_dt)

    def _transposed_conv(
        self,
        weight: Tensor,
        groups: int,
        s_: tuple[int, ...],
        d_: tuple[int, ...],
        pads: tuple[tuple[int, int], ...],
        bias: Tensor | None = None,
    ) -> Tensor:
        """conv_transpose2d with its inputs checked, and `pads` (before, after) per spatial axis of the zero-stuffed
        input (negative: cropped)."""
        nd = weight.ndim - 2
        cin, rcout, ks = weight.shape[0], weight.shape[1], weight.shape[2:]
        # weight as a plain conv's: (groups * C_out/groups, C_in/groups, *kernel), flipped in space
        w = (
            weight.reshape((groups, cin // groups, rcout) + ks)
            .transpose(1, 2)
            .reshape((groups * rcout, cin // groups) + ks)
        )
        w = w.flip(tuple(range(2, 2 + nd)))
        if any(s > 1 for s in s_) and all(math.gcd(s, d) == 1 for s, d in zip(s_, d_, strict=True)):
            return self._phase_conv(w, groups, s_, d_, pads, bias)
        x = self
        for i, s in enumerate(s_):
            x = x._spread(2 + i, s)
        x = x.pad(((0, 0), (0, 0)) + pads)
        if any(s > 1 for s in s_):
            # stored once, spread and padded: the convolution's windows over the views of a spread (a reshape of a
            # pad per axis) would compute each tap's address with divisions and modulos, every read bounds-checked
            # (a stride-2 3x3 conv's input gradient over 4x64x56x56: 0.7 s, 90% of it reading zeros that way)
            x = x.contiguous()
        return x.conv2d(w, bias, groups=groups, dilation=d_)

    def _phase_conv(
        self,
        w: Tensor,
        groups: int,
        s_: tuple[int, ...],
        d_: tuple[int, ...],
        pads: tuple[tuple[int, int], ...],
        bias: Tensor | None,
    ) -> Tensor:
        """The stride-1 convolution (weight `w`, dilation d_) of `self` spread by s_ (s - 1 zeros between neighbours)
        and padded by `pads`, without the zeros: the outputs at o = q * s + r (one phase r per axis) read only the taps
        t with r + t * d - pad_before divisible by s, which are every s-th tap from the first one, at inputs d apart
        (s and d coprime). So each phase is a convolution of the input itself with that slice of the kernel, and the
        phases interleave into the output: s^n times fewer products than over the spread input, where all but one
        in s^n of the inputs are zeros."""
        nd = len(s_)
        n_sp, ks = self.shape[2:], w.shape[2:]
        out_sp = tuple(
            (n - 1) * s + 1 + pb + pa - d * (k - 1) for n, s, d, k, (pb, pa) in zip(n_sp, s_, d_, ks, pads, strict=True)
        )
        if any(o <= 0 for o in out_sp):
            raise ShapeError(f"conv_transpose: input {self.shape} and weight {w.shape} give an empty output {out_sp}")
        # per axis and phase r: (first tap, taps, input offset of the first tap, outputs of the phase)
        plans = []
        for s, d, k, (pb, _), o in zip(s_, d_, ks, pads, out_sp, strict=True):
            axis = []
            for r in range(s):
                t0 = next((t for t in range(min(k, s)) if (r + t * d - pb) % s == 0), None)
                taps = 0 if t0 is None else len(range(t0, k, s))
                axis.append((t0, taps, 0 if t0 is None else (r + t0 * d - pb) // s, -(-(o - r) // s)))
            plans.append(axis)
        full = tuple(-(-o // s) for o, s in zip(out_sp, s_, strict=True))
        cout, dtype = w.shape[0], least_upper_dtype(self.dtype, w.dtype)
        phases: dict[tuple[int, ...], Tensor] = {}
        for rs in itertools.product(*(range(s) for s in s_)):
            axis_plans = [plans[i][r] for i, r in enumerate(rs)]
            size = tuple(q for *_, q in axis_plans)
            if any(taps == 0 or q == 0 for _, taps, _, q in axis_plans):
                # no tap lands on this phase (a kernel shorter than the stride), or no output does
                phases[rs] = Tensor.zeros((self.shape[0], cout) + full, dtype=dtype, device=self.device)
                continue
            every_sth = tuple(slice(t0, None, s) for (t0, *_), s in zip(axis_plans, s_, strict=True))
            sub = w[(slice(None), slice(None)) + every_sth].contiguous()
            # input i = q + a + j * d for output q and tap j: pad (or crop) so that the correlation starts at a and
            # yields q outputs
            xp = self.pad(
                ((0, 0), (0, 0))
                + tuple(
                    (-a, q + d * (taps - 1) - n + a) for (_, taps, a, q), d, n in zip(axis_plans, d_, n_sp, strict=True)
                )
            )
            out = xp.conv2d(sub, groups=groups, dilation=d_)
            # every phase padded to the longest one's length (phases past the output's end are cut below). Many
            # phases are stored first (a kernel each): fused into the interleaving, every output computes every
            # phase's convolution under a mask (16 phases of a stride-4 8x8 transposed conv: 70x torch's time); the 4
            # of a stride-2 2-d one cost less fused than stored and interleaved (a 32x32x32x32 conv's input gradient:
            # 15 vs 18 ms a step)
            to_full = tuple((0, f - q) for f, q in zip(full, size, strict=True))
            out = out.cast(dtype)
            phases[rs] = (out.contiguous() if math.prod(s_) > MAX_FUSED_PHASES else out).pad(((0, 0), (0, 0)) + to_full)
        # interleave: phases on new axes after each spatial axis, merged by a reshape
        for i in reversed(range(nd)):
            merged: dict[tuple[int, ...], Tensor] = {}
            for rs in itertools.product(*(range(s) for s in s_[:i])):
                merged[rs] = Tensor.stack(*(phases[rs + (r,)] for r in range(s_[i])), dim=3 + i)
            phases = merged
        ret = phases[()].reshape((self.shape[0], cout) + tuple(f * s for f, s in zip(full, s_, strict=True)))
        ret = ret.shrink(((0, ret.shape[0]), (0, cout)) + tuple((0, o) for o in out_sp))
        return ret if bias is None else ret + bias.cast(dtype).reshape((1, cout) + (1,) * nd)

    def _spread(self, axis: int, s: int) -> Tensor:
        """s - 1 zeros between neighbours along `axis` (a strided convolution's output gradient, placed back)."""
        if s == 1:
            return self
        n = self.shape[axis]
        x = self.unsqueeze(axis + 1).pad(tuple((0, s - 1) if a == axis + 1 else (0, 0) for a in range(self.ndim + 1)))
        return x.flatten(axis, axis + 1)._slice_axis(axis, 0, (n - 1) * s + 1)

    def _pool_prepare(
        self, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: bool, op: str
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...], tuple[int, ...]]:
        nk = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 2
        k_ = _positive_n(kernel_size, nk, "kernel_size", op)
        n = len(k_)
        if self.ndim < n:
            raise ShapeError(f"{op}: kernel {k_} has more dims than the input shape {self.shape}")
        # (torch's stride=[] is the kernel too)
        s_ = _positive_n(
            k_ if stride is None or (isinstance(stride, (tuple, list)) and not stride) else stride, n, "stride", op
        )
        d_ = _positive_n(dilation, n, "dilation", op)
        pads = _conv_pads(padding, n, k_, d_, op)
        extra = []
        for L, k, s, d, (pb, pa) in zip(self.shape[-n:], k_, s_, d_, pads, strict=True):
            if max(pb, pa) > k // 2:
                # a window could then cover only padding (PyTorch's rule, on the kernel size without dilation)
                raise ArgumentError(f"{op}: padding {padding} is more than half the kernel {k_}; pad at most k // 2")
            span = L + pb + pa - d * (k - 1) - 1
            o = (-(-span // s) if ceil_mode else span // s) + 1
            if o < 1:
                raise ShapeError(f"{op}: kernel {k_} (dilation {d_}) is larger than the padded input {self.shape}")
            # the last window must start inside the input or the left padding (PyTorch's rule)
            if ceil_mode and (o - 1) * s >= L + pb:
                o -= 1
            extra.append(max(0, (o - 1) * s + d * (k - 1) + 1 - (L + pb + pa)))
        return k_, s_, d_, pads, tuple(extra)

    def max_pool2d(
        self,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Any:
        """Max over windows of the last len(kernel_size) axes (padding counts as -inf), the arguments in
        torch.nn.functional.max_pool2d's order. With return_indices, also where each max is: its (int32) flat index
        in the input's pooled plane (the first one on a tie, the last NaN in a window holding one), as torch.

        >>> Tensor.arange(16).reshape(1, 1, 4, 4).max_pool2d().tolist()
        [[[[5, 7], [13, 15]]]]
        """
        k_, s_, d_, pads, extra = self._pool_prepare(kernel_size, stride, dilation, padding, ceil_mode, "max_pool2d")
        n = len(k_)
        full = ((0, 0),) * (self.ndim - n) + tuple((b, a + e) for (b, a), e in zip(pads, extra, strict=True))
        low = dtypes.min(self.dtype)
        windows = self.pad(full, value=low)._pool(k_, s_, d_, gradient_by_taps=True)
        axes = tuple(range(-n, 0))
        values = windows.max(axis=axes)
        _set_first_max_gradient(values.uop, windows.uop, n)
        if not return_indices:
            return values
        # the flat position of every input element (padding: past the end), pooled the same way
        plane = prod(self.shape[-n:])
        pos = Tensor.arange(plane, device=self.device, dtype=dtypes.positions(plane)).reshape(self.shape[-n:])
        pos_windows = pos.pad(full[-n:], value=plane)._pool(k_, s_, d_)
        return values, _window_argmax(windows, values, pos_windows, plane, axes)

    def max_unpool2d(
        self,
        indices: Tensor,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        output_size: Sequence[int] | None = None,
    ) -> Tensor:
        """The inverse of max_pool2d(return_indices=True): zeros with each value put back at its index.

        >>> v, i = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d(return_indices=True)
        >>> v.max_unpool2d(i).tolist()
        [[[[0.0, 0.0], [0.0, 4.0]]]]
        """
        k_ = _tuple_n(kernel_size, len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 2, "kernel_size")
        n = len(k_)
        s_ = _tuple_n(stride if stride is not None else k_, n, "stride")
        p_ = _tuple_n(padding, n, "padding")
        if indices.shape != self.shape or not dtypes.is_int(indices.dtype):
            raise ShapeError(
                f"max_unpool2d: indices {indices.shape} ({indices.dtype}) must be ints shaped {self.shape}"
            )
        op = f"max_unpool{n}d"
        default = tuple((i - 1) * s - 2 * p + k for i, s, p, k in zip(self.shape[-n:], s_, p_, k_, strict=True))
        out = tuple(int(o) for o in output_size[-n:]) if output_size is not None else default
        for axis, (o, d, s) in enumerate(zip(out, default, s_, strict=True)):
            # torch's rule: the sizes that pool back to the input's, within a stride of the default either way
            if not d - s < o < d + s:
                raise ArgumentError(
                    f"{op}: invalid output_size {tuple(output_size)} (dim {axis} must be between {d - s} and "
                    f"{d + s}, exclusive, for input {self.shape}, kernel_size {k_}, stride {s_}, padding {p_})"
                )
        batch = self.shape[:-n]
        flat = Tensor.zeros(*batch, prod(out), dtype=self.dtype, device=self.device)
        try:
            flat = flat.scatter(len(batch), indices.reshape(*batch, -1), self.reshape(*batch, -1))
        except IndexError as e:
            raise _UnpoolIndexError(
                f"{op}: an index lies outside the output plane {out} ({e}); pass the pooled input's size as output_size"
            ) from None
        return flat.reshape(batch + out)

    @in_float32
    def avg_pool2d(
        self,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
        *,
        dilation: int | Sequence[int] = 1,
    ) -> Tensor:
        """Mean over windows of the last len(kernel_size) axes, dividing like PyTorch (see count_include_pad; a
        `divisor_override` divides every window's sum by itself), the arguments in torch.nn.functional.avg_pool2d's
        order (`dilation`, which torch lacks, by keyword). An integer input gives integers: each window's sum divided
        with truncation toward zero, as PyTorch's int64 pooling.

        >>> Tensor.arange(16).reshape(1, 1, 4, 4).float().avg_pool2d().tolist()
        [[[[2.5, 4.5], [10.5, 12.5]]]]
        """
        k_, s_, d_, pads, extra = self._pool_prepare(kernel_size, stride, dilation, padding, ceil_mode, "avg_pool2d")
        n = len(k_)
        integer = dtypes.is_int(self.dtype)
        x = self.cast(dtypes.int64) if integer else self._float()
        full = ((0, 0),) * (self.ndim - n) + tuple((b, a + e) for (b, a), e in zip(pads, extra, strict=True))
        total = x.pad(full)._pool(k_, s_, d_, gradient_by_taps=True).sum(tuple(range(-n, 0)))
        if divisor_override is not None:
            if isinstance(divisor_override, bool) or not isinstance(divisor_override, int) or divisor_override <= 0:
                raise ArgumentError(f"avg_pool2d: divisor_override must be a positive int, got {divisor_override!r}")
            count: Tensor | int = divisor_override
        else:
            # how many elements each window averages: the input, the explicit padding if counted, never the ceil
            # overhang
            ones = Tensor.ones(self.shape[-n:], device=self.device, dtype=x.dtype)
            ones = ones.pad(pads, value=1 if count_include_pad else 0)
            ones = ones.pad(tuple((0, e) for e in extra))
            count = ones._pool(k_, s_, d_).sum(tuple(range(-n, 0)))
        return total.div(count, rounding_mode="trunc").cast(self.dtype) if integer else total / count

    @_returns_copy
    def interpolate(
        self,
        size: int | Sequence[int] | None = None,
        scale_factor: float | Sequence[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
        antialias: bool = False,
    ) -> Tensor:
        """Resize the spatial axes (all but the first two) to `size`, or by `scale_factor` (the output is
        floor(L * scale), and positions map back by 1 / scale, as PyTorch's default; with `recompute_scale_factor`
        by input / output size, as for that `size`): mode "nearest" (the default),
        "nearest-exact", "linear" (bi/trilinear, separable), "bicubic" (4-d float or uint8 input, PyTorch's cubic
        convolution with a = -0.75 and border taps clamped) or "area" (float input, adaptive_avg_pool2d to the new
        size), the arguments in torch.nn.functional.interpolate's order. `antialias` (modes "bilinear" and
        "bicubic", a 4-d float or uint8 input) filters as PyTorch's: a downsampling's filter stretched to cover every
        input pixel an output spans, one weight table per axis (see `uopkit.tensor.resample`).

        >>> Tensor([[[1.0, 2.0]]]).interpolate(4, mode="nearest").tolist()
        [[[1.0, 1.0, 2.0, 2.0]]]
        """
        if antialias and (mode not in ("linear", "bilinear", "bicubic") or self.ndim != 4):
            raise ArgumentError(
                f"interpolate: antialias=True needs mode 'bilinear' or 'bicubic' and a 4-d input (N, C, H, W), got "
                f"mode {mode!r} and shape {self.shape}"
            )
        if self.dtype in dtypes.halves and mode in ("linear", "bilinear", "trilinear", "bicubic", "area"):
            # in float32 and rounded once, as PyTorch (rounding each axis' pass and product to a half float left a
            # quarter of the values off by up to 5 ulp)
            return (
                self.float()
                .interpolate(size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
                .cast(self.dtype)
            )
        if mode not in ("linear", "bilinear", "trilinear", "bicubic", "nearest", "nearest-exact", "area"):
            raise ArgumentError(
                f"interpolate: unknown mode {mode!r}; use nearest, nearest-exact, linear, bilinear, trilinear, bicubic "
                "or area"
            )
        if align_corners is not None and (mode.startswith("nearest") or mode == "area"):
            raise ArgumentError(
                f"interpolate: align_corners can only be set with the linear and bicubic modes, not {mode!r}"
            )
        nsp = self.ndim - 2
        if nsp < 1:
            raise UnsupportedRankError(f"interpolate: needs (N, C, *spatial), got shape {self.shape}")
        if mode == "area" and not dtypes.is_float(self.dtype):
            raise TypeError(f"interpolate: mode 'area' needs a float input, not {self.dtype} (cast it first)")
        if (mode == "bicubic" or antialias) and not (dtypes.is_float(self.dtype) or self.dtype == dtypes.uint8):
            # (uint8 images resize in PyTorch's fixed point; its other integer kernels are the plain linear modes')
            what = "antialias=True" if antialias else f"mode {mode!r}"
            raise TypeError(f"interpolate: {what} needs a float or uint8 input, not {self.dtype} (cast it first)")
        if mode == "bicubic" and nsp != 2:
            raise UnsupportedRankError(
                f"interpolate: mode 'bicubic' needs a 4-d input (N, C, H, W), got shape {self.shape}"
            )
        if (size is None) == (scale_factor is None):
            raise ArgumentError("interpolate: give exactly one of size and scale_factor")
        ratios: list[float | None] = [None] * nsp
        if scale_factor is not None:
            scales = (
                [float(f) for f in scale_factor]
                if isinstance(scale_factor, (tuple, list))
                else [float(scale_factor)] * nsp
            )
            if len(scales) != nsp or not all(f > 0 and math.isfinite(f) for f in scales):
                raise ArgumentError(f"interpolate: scale_factor {scale_factor} must be {nsp} positive finite numbers")
            size = [int(math.floor(L * f)) for L, f in zip(self.shape[2:], scales, strict=True)]
            if not recompute_scale_factor:
                ratios = [1 / f for f in scales]
        elif recompute_scale_factor:
            raise ArgumentError("interpolate: recompute_scale_factor needs scale_factor, not size (as PyTorch)")
        if mode == "area":
            # (an axis resized to 0 is an empty result there, as PyTorch's; the other modes refuse it, as its)
            return self._adaptive_pool(_tuple_n(size, nsp, "size"), "interpolate")
        out_size = _positive_n(size, nsp, "size", "interpolate")
        # an integer image stays one: each axis (the last first) resized, then rounded (uint8 as PyTorch's: 16-bit
        # fixed-point weights)
        as_int = not mode.startswith("nearest") and not dtypes.is_float(self.dtype)
        x = self if mode.startswith("nearest") or as_int else self._float()
        axes = list(enumerate(zip(self.shape[2:], out_size, strict=True)))
        for i, (L, O) in reversed(axes) if as_int else axes:
            ax = 2 + i
            ratio = ratios[i] if ratios[i] is not None else L / O
            # an axis whose size doesn't change is copied whatever the scale_factor, as PyTorch's kernels do (its
            # nearest mode only on 2-d images, its nearest-exact never, its bicubic only antialiased or on uint8)
            copies = (
                mode in ("linear", "bilinear", "trilinear")
                or (mode == "nearest" and nsp == 2)
                or (mode == "bicubic" and (antialias or as_int))
            )
            if L == O and (ratio == 1 or copies):
                continue
            pos = np.arange(O, dtype=np.float64)
            if mode.startswith("nearest"):
                # the source index in float32, as PyTorch's kernels compute it (in float64 some outputs near a
                # boundary took the neighbouring pixel: 6 -> 74 wide, output 37)
                at = np.arange(O, dtype=np.float32) + np.float32(0.5 if mode == "nearest-exact" else 0.0)
                idx = np.minimum(np.floor(at * np.float32(ratio)).astype(np.int64), L - 1)
                x = x._take(ax, idx)
                continue
            if align_corners:
                src = pos * ((L - 1) / (O - 1)) if O > 1 else np.zeros(O)
            else:
                src = (pos + 0.5) * ratio - 0.5
            if antialias:
                scale = ((L - 1) / (O - 1) if O > 1 else 0.0) if align_corners else ratio
                table = antialias_table(L, O, scale, "bicubic" if mode == "bicubic" else "bilinear")
                x = _fixed_point_along(x, ax, table) if as_int else _table_along(x, ax, table)
                continue
            if mode == "bicubic":
                x = _fixed_point_along(x, ax, clamped_cubic_table(L, src)) if as_int else _cubic_along(x, ax, src, L)
                continue
            if self.dtype == dtypes.uint8:
                x = _uint8_linear_along(x, ax, L, O, ratio, bool(align_corners))
                continue
            xf = x._float()
            # (the weights in float64 for a float64 input: float32 ones left it a float32 result)
            np_dt = _weight_np_dtype(xf.dtype)
            src = linear_source_positions(L, O, ratio, bool(align_corners), np_dt)
            lo = np.minimum(np.floor(src).astype(np.int64), L - 1)
            hi = np.minimum(lo + 1, L - 1)
            w = Tensor((src - lo).astype(np_dt), device=self.device).cast(xf.dtype)
            w = w.reshape(tuple(O if a == ax else 1 for a in range(x.ndim)))
            a, b = xf._take(ax, lo), xf._take(ax, hi)
            x = a + (b - a) * w
            if as_int:
                x = (x + 0.5).floor().cast(self.dtype)
        return x

    def _take_counted(self, axis: int, idx: np.ndarray) -> Tensor:
        # `_take` of a list whose length depends on the data (a mask's hits): a kernel is compiled for its output's
        # length, so each new count compiled a new one (~100 ms a call of `x[x > 0]`); the list is padded to a
        # power of two, that is taken and realized, and the result is a prefix view of its buffer (no kernel).
        # (a value wanting a gradient keeps the plain take, not cut by a realize mid-graph)
        n = len(idx)
        if n == 0 or repeated_progression(idx) is not None or self.requires_grad:
            return self._take(axis, idx)
        padded = np.concatenate([idx, np.full((1 << (n - 1).bit_length()) - n, idx[0], idx.dtype)])
        return self._take(axis, padded).realize()._slice_axis(axis, 0, n)

    def _take(self, axis: int, idx: np.ndarray) -> Tensor:
        # self indexed by a host list along one axis: as movement ops where the list is a progression whose every
        # element repeats as often (a slice with a step, each element then repeated: nearest upsampling by an
        # integer factor), else an index tensor
        runs = repeated_progression(idx)
        if runs is None or not 0 <= runs[0] <= runs[0] + runs[1] * (runs[2] - 1) < self.shape[axis]:
            index: list[Any] = [slice(None)] * axis + [Tensor(idx.astype(np.int32), device=self.device)]
            return self[tuple(index)]
        start, step, count, repeat = runs
        picked = (
            self._slice_axis(axis, start, start + 1)
            if count == 1
            else self[(slice(None),) * axis + (slice(start, start + step * (count - 1) + 1, step),)]
        )
        if repeat == 1:
            return picked
        shape = picked.shape
        wide = picked.unsqueeze(axis + 1)._broadcast_to(shape[: axis + 1] + (repeat,) + shape[axis + 1 :])
        return wide.reshape(shape[:axis] + (count * repeat,) + shape[axis + 1 :])


def _uint8_linear_along(x: Tensor, axis: int, L: int, O: int, ratio: float, align_corners: bool) -> Tensor:
    """A uint8 image resized linearly along `axis` as PyTorch's uint8 kernel does: each output a sum of at most two
    taps with weights in fixed point (as many fraction bits as keep the largest weight below 2**15), rounded half
    up by a shift and clamped to 0..255."""
    step = ((L - 1) / (O - 1) if O > 1 else 0.0) if align_corners else ratio
    centers = np.arange(O) * step + 0.5 if align_corners else (np.arange(O) + 0.5) * step
    first = np.maximum((centers - 0.5).astype(np.int64), 0)  # int() truncates: centers - 0.5 >= 0 here
    last = np.minimum((centers + 1.5).astype(np.int64), L)
    taps = [first, np.minimum(first + 1, L - 1)]
    weights = [np.where(first + k < last, np.maximum(0.0, 1 - np.abs(first + k - centers + 0.5)), 0.0) for k in (0, 1)]
    total = weights[0] + weights[1]
    weights = [np.divide(w, total, out=np.zeros_like(w), where=total > 0) for w in weights]
    fixed, bits = fixed_point(np.stack(weights))
    shape = tuple(O if i == axis else 1 for i in range(x.ndim))
    wide = x.cast(dtypes.int32)
    acc = None
    for idx, w in zip(taps, fixed, strict=True):
        tap = wide._take(axis, idx) * Tensor(w, device=x.device).reshape(shape)
        acc = tap if acc is None else acc + tap
    assert acc is not None
    return _rounded_uint8(acc, bits)


def _rounded_uint8(acc: Tensor, bits: int) -> Tensor:
    # a fixed-point sum with `bits` fraction bits to uint8 as PyTorch's kernels: rounded half up by a shift, clamped
    return ((acc + (1 << (bits - 1))) >> bits).clamp(0, 255).cast(dtypes.uint8)


@without_autocast
def _table_along(x: Tensor, axis: int, table: np.ndarray) -> Tensor:
    """`x` resampled along `axis` by an (O, L) weight table: one matrix product (in x's dtype, autocast or not: a
    product of the weights with a zero spreads a NaN or an inf across the whole row, where PyTorch's taps keep it
    to the outputs whose window holds it)."""
    weights = Tensor(table.T.astype(_weight_np_dtype(x.dtype)), device=x.device)
    return (x._move_to_end(axis) @ weights)._move_from_end(axis)


def _fixed_point_along(x: Tensor, axis: int, table: np.ndarray) -> Tensor:
    """A uint8 `x` resampled along `axis` by an (O, L) weight table as PyTorch's uint8 kernels: the weights in
    fixed point, summed in int32 (exact), then rounded and clamped to 0..255."""
    fixed, bits = fixed_point(table)
    acc = x.cast(dtypes.int32)._move_to_end(axis) @ Tensor(np.ascontiguousarray(fixed.T), device=x.device)
    return _rounded_uint8(acc, bits)._move_from_end(axis)


def _cubic_along(x: Tensor, axis: int, src: np.ndarray, L: int) -> Tensor:
    """`x` resampled along `axis` at the positions `src` by cubic convolution (Keys, a = -0.75, as PyTorch's
    bicubic): four taps around each position, indices past the border clamped to it."""
    first, weights = cubic_taps(src)
    shape = tuple(len(src) if i == axis else 1 for i in range(x.ndim))
    out = None
    for k, w in enumerate(weights):
        idx = np.clip(first + k, 0, L - 1)
        tap = x._take(axis, idx) * Tensor(w.astype(_weight_np_dtype(x.dtype)), device=x.device).cast(x.dtype).reshape(
            shape
        )
        out = tap if out is None else out + tap
    assert out is not None
    return out


def _product_dtype(dt: DType) -> DType:
    """The dtype a matrix product or convolution of `dt` operands multiplies in: half floats in their float32
    accumulator, as PyTorch's (the product of two halves is exact in float32; rounded to half first, each product
    costs a conversion each way, bfloat16's a dozen integer ops, and loses bits the sum keeps)."""
    return _sum_acc_dtype(dt) if dt in dtypes.halves else dt


def _matrix_product_uop(x: UOp, w: UOp) -> UOp | None:
    """The nodes `dot` builds for two matrices of one dtype on one device that accumulates in that dtype, built
    directly (None: another case, for the general path). A layer's forward pass is mostly this, and the public methods'
    checks and intermediate tensors cost several times the nodes."""
    xs, ws = x.shape, w.shape
    if len(xs) != 2 or len(ws) != 2 or x.dtype is not w.dtype or x.device != w.device:
        return None
    (n, k), (k2, m) = xs, ws
    dt = x.dtype
    if k != k2 or k == 1 or n * m * k == 0 or _sum_acc_dtype(dt) is not dt:
        # (a mismatch raises on the general path; a sum over one element or none, and half floats, go there too)
        return None
    # x as (n, 1, k) and w transposed as (1, m, k), both broadcast to (n, m, k)
    xb = UOp(Ops.RESHAPE, dt, (x,), (n, 1, k))
    if m != 1:
        xb = UOp(Ops.EXPAND, dt, (xb,), (n, m, k))
    wb = UOp(Ops.RESHAPE, dt, (UOp(Ops.PERMUTE, dt, (w,), (1, 0)),), (1, m, k))
    if n != 1:
        wb = UOp(Ops.EXPAND, dt, (wb,), (n, m, k))
    product = UOp(Ops.MUL, dt, (xb, wb))
    out = UOp(Ops.RESHAPE, dt, (UOp(Ops.REDUCE_AXIS, dt, (product,), (Ops.ADD, (2,))),), (n, m))
    _set_matrix_product_gradient(out, x, w)
    return out


def _set_matrix_product_gradient(out: UOp, x: UOp, w: UOp) -> None:
    """x @ w's gradients as the two products PyTorch computes: g @ w.T for x and x.T @ g for w. The chain of rules
    gives w's as a sum over the batch in w.T's layout, read back through a transpose: stored (w.grad) and read by the
    optimizer's update across the rows, a strided pass over w per step. Built as x.T @ g it is stored in w's layout."""
    from uopkit.gradient import set_gradient

    def product(a: UOp, b: UOp) -> UOp:
        fast = _matrix_product_uop(a, b)
        return fast if fast is not None else Tensor(a).dot(Tensor(b)).uop

    def transposed(u: UOp) -> UOp:
        return UOp(Ops.PERMUTE, u.dtype, (u,), (1, 0))

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, UOp | None]:
        return (product(g, transposed(w)) if wanted[0] else None, product(transposed(x), g) if wanted[1] else None)

    set_gradient(out, (x, w), rule)


def _with_adjoint_gradient(
    out: Tensor,
    x: Tensor,
    weight: Tensor,
    s_: tuple[int, ...],
    d_: tuple[int, ...],
    p_: tuple[int, ...],
    groups: int,
) -> Tensor:
    """`out`, the strided transposed convolution of x, with x's gradient given as PyTorch computes it: the transposed
    convolution is the adjoint of the convolution of its output with the same weight (stride, padding, dilation and
    groups), so x's gradient is that convolution of the incoming gradient. The chain of rules through the phases gave
    each phase's input gradient over an odd-sized padded view with the weight read through its flipped slices (a
    8x32x32x32 4x4 stride-2 transposed conv: 4 kernels of 6-28 ms, where the convolution is one of 6 ms). The weight's
    gradient keeps the phases' chain: a small convolution per phase."""
    from uopkit.gradient import _not_kernel, compute_gradient, set_gradient

    x_uop, w_uop, phases = x.uop, weight.uop, out.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, UOp | None]:
        grad = Tensor(g)
        gx = gw = None
        if wanted[0]:
            gx = grad.conv2d(Tensor(w_uop).cast(grad.dtype), groups=groups, stride=s_, dilation=d_, padding=p_)
            # (an output_padding on a stride-1 axis, allowed below the dilation, makes that convolution op rows
            # longer than x: output row i reads the incoming gradient where x's row i landed, so x's rows come first)
            in_sp = (x_uop.shape or ())[2:]
            gx = gx.shrink((None, None) + tuple((0, n) for n in in_sp)).cast(x_uop.dtype).uop
        if wanted[1]:
            # (the incoming gradient as it is, not detached: it depends on x and w itself, and a second derivative
            # goes through it). The walk stops at x: where x depends on w (a recurrent decoder applying the same
            # transposed conv to its last output), the outer walk takes x's gradient there already, and walking into
            # x here added w's gradient through x a second time
            gw = compute_gradient(phases, g, {w_uop}, phases.toposort(gate=lambda u: u is not x_uop and _not_kernel(u)))
            gw = gw.get(w_uop)
        return gx, gw

    node = UOp(Ops.RESHAPE, phases.dtype, (phases,), phases.shape)
    set_gradient(node, (x_uop, w_uop), rule)
    return Tensor(node)


# a pool's windows with at most this many taps get their gradient as a sum of one placed slice per tap (3x3, 7x7,
# 3x3x3); more keep the movement ops' chain of rules
MAX_GIVEN_WINDOW_TAPS = 64


def _set_windows_gradient(windows: UOp, x: UOp, k_: tuple[int, ...], s_: tuple[int, ...], d_: tuple[int, ...]) -> None:
    """The gradient of overlapping windows (..., *out, *k) of x (..., *L), given whole: for each tap j, the windows'
    gradient at that tap goes to x[o*s + j*d], its slice spread s apart and shifted by j*d; the taps' slices add up.

    The windows' gradient is stored once, taps outermost (each tap's slice contiguous), and summed by one elementwise
    kernel with a bounds-checked read per tap. The chain of rules through the windows' movement ops (an expand read
    back with a division and a modulo) gives two reduce kernels doing that arithmetic per element and tap: a 3x3
    stride-2 max pool's forward and backward over 16x64x56x56 took 160-260 ms on one thread, 70-110 ms this way
    (PyTorch 35-45 ms: the checked reads stay scalar)."""
    from uopkit.gradient import set_gradient

    n = len(k_)
    in_sp = (x.shape or ())[-n:]
    out_sp = (windows.shape or ())[-2 * n : -n]

    # with a stride, x's positions are taken as (q, r) = divmod(p, s) per axis: tap j's slice lands in lane
    # r = j*d mod s only, shifted by j*d // s along q. The sum is computed (and stored) in that (..., q, r, ...) layout,
    # whose merge back to (..., p, ...) is a plain reshape: spread slices (s - 1 zeros between neighbours) read back
    # through a reshape cost a division and a modulo per tap and element (a 3x3 stride-2 pool's backward over
    # 4x64x56x56: 10-14 ms of its 16, one thread)
    phases = tuple(-(-L // s) for L, s in zip(in_sp, s_, strict=True))

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        lead = len(g.shape or ()) - 2 * n
        by_tap = Tensor(g).permute([*range(lead), *range(lead + n, lead + 2 * n), *range(lead, lead + n)]).contiguous()
        strided = any(s > 1 for s in s_)
        total: Tensor | None = None
        for taps in itertools.product(*(range(k) for k in k_)):
            part = by_tap.shrink((None,) * lead + tuple((j, j + 1) for j in taps) + (None,) * n)
            places: list[tuple[int, int]] = []
            if strided:
                # axis i of the slice becomes the pair (q, r): one pad over a reshape (a pad, then an unsqueeze, reads
                # back through a division)
                part = part.reshape(part.shape[:lead] + tuple(x for o in out_sp for x in (o, 1)))
                for j, s, d, o, q in zip(taps, s_, d_, out_sp, phases, strict=True):
                    shift, lane = divmod(j * d, s)
                    places += [(shift, q - o - shift), (lane, s - 1 - lane)]
            else:
                part = part.reshape(part.shape[:lead] + out_sp)
                places = [(j * d, L - j * d - o) for j, d, L, o in zip(taps, d_, in_sp, out_sp, strict=True)]
            part = part.pad(((0, 0),) * lead + tuple(places))
            total = part if total is None else total + part
        assert total is not None
        if strided:
            whole = tuple(q * s for q, s in zip(phases, s_, strict=True))
            merged = total.contiguous().reshape(total.shape[:lead] + whole)
            total = merged.shrink((None,) * lead + tuple((0, L) for L in in_sp))
        return (total.uop,)

    set_gradient(windows, (x,), rule)


def _weight_np_dtype(dt: DType) -> type:
    # host-computed interpolation weights: float64 for a float64 tensor, else float32
    return np.float64 if dt == dtypes.float64 else np.float32


def _view_base(view: UOp) -> UOp:
    # the value `view`'s movement ops read
    chain = view.movement_chain()
    return chain[-1].src[0] if chain else view


def _over_stored_copy(view: UOp) -> UOp:
    # `view`'s movement ops over a stored copy of its base (as it is when that is a buffer already)
    chain = view.movement_chain()
    base = _view_base(view)
    if base.op is Ops.BUFFER:
        return view
    out = UOp(Ops.CONTIGUOUS, base.dtype, (base,))
    for node in reversed(chain):
        out = UOp(node.op, node.dtype, (out,), node.arg)
    return out


def _window_argmax(windows: Tensor, values: Tensor, pos: Tensor, past: int, axes: tuple[int, ...]) -> Tensor:
    """Where each window's max is, as PyTorch's max pool kernels pick it: `pos` holds each tap's position (`past` for
    a tap outside the window), `values` the windows' max. The first maximum in scan order, but in a window holding a
    NaN its last NaN (their scan replaces the running max at every NaN)."""
    m = values.reshape(values.shape + (1,) * len(axes))
    # positions grow along a window in scan order: the smallest hit is the first
    first = (windows == m).where(pos, past).min(axis=axes)
    if not dtypes.is_float(windows.dtype):
        return first
    # (one past each NaN's position, so that 0 says there is none)
    after_last_nan = windows.isnan().where(pos + 1, 0).max(axis=axes)
    return (after_last_nan > 0).where(after_last_nan - 1, first)


def _set_first_max_gradient(values: UOp, windows: UOp, n: int) -> None:
    """A max pool's gradient goes to the first maximum of each window (in scan order; in a window holding a NaN, its
    last NaN), as PyTorch's: not shared among ties (the max reduce's own rule), which a window of zeros after a ReLU
    has. It is a function of the pooled values with a zero derivative, as torch's max_pool backward (see
    `_reading_input`)."""
    from uopkit.gradient import set_gradient

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        # the windows over a stored copy of what they read, and their max taken again over it: equality must be exact,
        # and the forward's max may have been computed (and stored, by a realize between backward() and reading the
        # gradients) in a kernel that rounded its input otherwise, a convolution summed in another order: no tap
        # equalled it and the gradient was lost. (As the max reduce's own rule, gradient.do_reduce_max_grad)
        w = Tensor(_over_stored_copy(windows))
        axes = tuple(range(-n, 0))
        taps = prod(w.shape[-n:])
        tap = Tensor.arange(taps, device=w.device, dtype=dtypes.int32).reshape(w.shape[-n:])
        chosen = _window_argmax(w, w.max(axis=axes), tap, taps, axes)
        first = tap == chosen.reshape(chosen.shape + (1,) * n)
        zero = Tensor(0, device=w.device, dtype=g.dtype)
        picked = first.where(Tensor(g).reshape((g.shape or ()) + (1,) * n), zero).uop
        # (linked to the windows' base, which the stored copy reads: the node a gradient of it walks through)
        return (_reading_input(picked, _view_base(windows)),)

    set_gradient(values, (windows,), rule)


def _set_conv_gradient(
    out: UOp,
    x: UOp,
    weight: UOp,
    windows: UOp,
    groups: int,
    s_: tuple[int, ...],
    d_: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    bias: UOp | None = None,
) -> None:
    """A convolution's gradients, given whole (as PyTorch computes them): the input's is the transposed convolution
    of the output's gradient, one conv kernel, where the chain of rules through the windows' movement ops gives a
    gather with a division and a modulo per element over every tap; the weight's is the sum over the batch and the
    output positions of the windows times the output's gradient, summed in the forward's accumulation dtype.
    `windows`: the forward's windows, (N, groups, 1, C_in/groups, *out, *kernel), in the dtype it multiplies in.
    `bias`: a bias added to the sums before `out` was rounded (a half convolution's), whose gradient is the output's
    summed over the batch and the positions."""
    from uopkit.gradient import set_gradient

    nd = len(s_)
    in_sp = (x.shape or ())[2:]
    (bs, cout), out_sp = (out.shape or ())[:2], (out.shape or ())[2:]
    ks = (weight.shape or ())[2:]
    x_dtype, w_dtype, out_dtype = x.dtype, weight.dtype, out.dtype

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        grad = Tensor(g)
        if wanted[1] and not (is_realized_view(g) or g.base.op is Ops.CONST):
            # the weight's gradient reads each of the output's gradients once per input channel and tap: computed
            # there (a BatchNorm's and a ReLU's backward, a few ops over several buffers), it runs that many times and
            # keeps the kernel off its register tiles (a 32x16x32x32 3x3 conv: 144 ms fused, 2.3 ms stored first)
            grad = grad.contiguous()
        gx = gw = None
        if wanted[0]:
            # x[i] was read by output o through tap j where i + pad_before = o*s + j*d: the output's gradient, with
            # s-1 zeros between neighbours, correlated with the flipped kernel; the pads line it up with x
            tpads = tuple(
                (d * (k - 1) - pb, L + pb - (o - 1) * s - 1)
                for k, d, s, (pb, _), L, o in zip(ks, d_, s_, pads, in_sp, out_sp, strict=True)
            )
            wt = Tensor(weight).cast(out_dtype)
            gx = grad._transposed_conv(wt, groups, s_, d_, tpads).cast(x_dtype).uop
        if wanted[1]:
            rcout, cin = cout // groups, (weight.shape or ())[1]
            g6 = grad.reshape((bs, groups, rcout, 1) + out_sp + (1,) * nd)
            full = (bs, groups, rcout, cin) + out_sp + ks
            prod_ = Tensor(windows)._broadcast_to(full) * g6._broadcast_to(full)
            summed = prod_.sum((0,) + tuple(range(4, 4 + nd)), dtype=_sum_acc_dtype(out_dtype))
            gw = summed.cast(w_dtype).reshape(weight.shape).uop
        if bias is None:
            return gx, gw
        gb = None
        if wanted[2]:
            over = (0,) + tuple(range(2, 2 + nd))
            gb = grad.sum(over, dtype=_sum_acc_dtype(out_dtype)).cast(bias.dtype).uop
        return gx, gw, gb

    set_gradient(out, (x, weight) if bias is None else (x, weight, bias), rule)
