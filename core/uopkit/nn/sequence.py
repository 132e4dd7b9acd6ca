"""torch.nn's sequence layers: RNN, LSTM and GRU over whole sequences (layers, directions, batch_first), multi-head
attention and the Transformer layers, with torch's parameter names so a torch state dict loads as it is; compared
with torch in tests/test_nn_sequence.py.

The recurrent layers loop over the time steps in Python and build one lazy graph (nothing is realized per step): the
input projections of all steps are one matmul per layer and direction, each step adds its hidden projection. A
PackedSequence runs padded, each step masked: a sequence's state stays where it is past its end (and, in the reverse
direction, at h0 until its last step), as torch's packed run.

>>> from uopkit import Tensor
>>> out, (h, c) = LSTM(3, 4, num_layers=2)(Tensor.ones(5, 2, 3))
>>> out.shape, h.shape, c.shape
((5, 2, 4), (2, 2, 4), (2, 2, 4))
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from uopkit.dtype import dtypes
from uopkit.nn.module import Module, ModuleList
from uopkit.nn.modules import Dropout, LayerNorm, Linear, _check_weight_dtype, _host, _uniform
from uopkit.nn.state import get_state_dict, load_state_dict
from uopkit.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
from uopkit.tensor import ArgumentError, ShapeError, Tensor
from uopkit.tensor.support import _gradient_stored_once

__all__ = [
    "RNN", "LSTM", "GRU", "MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerDecoder", "Transformer",
]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# recurrent layers


def _refuse_packed(layer: str, x: Any) -> None:
    # a PackedSequence is a named tuple (data, batch_sizes, sorted_indices, unsorted_indices)
    if hasattr(x, "batch_sizes"):
        raise TypeError(
            f"{layer}: PackedSequence inputs are not supported; pass a padded Tensor (L, N, H_in) (or (N, L, H_in) "
            "with batch_first) and read each sequence's output at its own last step"
        )
    if not isinstance(x, Tensor):
        raise TypeError(f"{layer}: the input must be a Tensor, got {type(x).__name__}")


class _RNNBase(Module):
    # the layers' parameters are attributes named as torch's (weight_ih_l0, weight_hh_l1_reverse, ...) so that
    # get_state_dict gives torch's keys; gates per step: 1 (RNN), 4 (LSTM: input, forget, cell, output), 3 (GRU:
    # reset, update, new), stacked in weight_ih/weight_hh as torch's cells
    gates = 1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
    ) -> None:
        name = type(self).__name__
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"{name}: hidden_size must be a positive int, got {hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"{name}: num_layers must be a positive int, got {num_layers!r}")
        if isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout must be a probability in [0, 1], got {dropout!r}")
        if proj_size < 0 or (proj_size and proj_size >= hidden_size):
            raise ValueError(f"{name}: proj_size must be 0 (none) or in [1, hidden_size), got {proj_size}")
        if dropout > 0 and num_layers == 1:
            # (torch warns too: dropout only acts between layers)
            warnings.warn(
                f"{name}: dropout={dropout} with num_layers=1 does nothing (dropout acts between layers)",
                stacklevel=3,
            )
        self.input_size, self.hidden_size, self.num_layers, self.proj_size = (
            input_size,
            hidden_size,
            num_layers,
            proj_size,
        )
        self.bias, self.batch_first, self.dropout, self.bidirectional = bias, batch_first, float(dropout), bidirectional
        # torch's initialization: every parameter U(-1/sqrt(hidden), 1/sqrt(hidden))
        bound = 1 / math.sqrt(hidden_size)
        out_size = proj_size or hidden_size
        for layer in range(num_layers):
            layer_in = input_size if layer == 0 else out_size * self._directions
            for suffix in self._suffixes():
                setattr(self, f"weight_ih_l{layer}{suffix}", _uniform((self.gates * hidden_size, layer_in), bound))
                setattr(self, f"weight_hh_l{layer}{suffix}", _uniform((self.gates * hidden_size, out_size), bound))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{suffix}", _uniform((self.gates * hidden_size,), bound))
                    setattr(self, f"bias_hh_l{layer}{suffix}", _uniform((self.gates * hidden_size,), bound))
                if proj_size:
                    setattr(self, f"weight_hr_l{layer}{suffix}", _uniform((proj_size, hidden_size), bound))

    @property
    def _directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self) -> tuple[str, ...]:
        return ("", "_reverse") if self.bidirectional else ("",)

    def flatten_parameters(self) -> None:
        """Nothing to do (torch's packs the weights for cuDNN); kept so that torch code calling it runs."""

    def __repr__(self) -> str:
        extra = "".join(
            f", {k}={getattr(self, k)!r}"
            for k, default in (("num_layers", 1), ("bias", True), ("batch_first", False), ("dropout", 0.0))
            + (("bidirectional", False), ("proj_size", 0))
            if getattr(self, k) != default
        )
        return f"{type(self).__name__}({self.input_size}, {self.hidden_size}{extra})"

    # one step of one layer and direction: gi its input projection (N, gates * hidden), state (h,) or, for LSTM,
    # (h, c); None entries are zeros (no initial state given), whose terms are left out
    def _step(self, gi: Tensor, state: tuple[Tensor | None, ...], name: str) -> tuple[Tensor, ...]:
        raise NotImplementedError

    def _param(self, kind: str, name: str) -> Tensor | None:
        return getattr(self, f"{kind}_{name}", None)

    def _hidden_projection(self, gi: Tensor, h: Tensor | None, name: str) -> Tensor:
        # h @ W_hh.T + b_hh; a zero h (the first step without an initial state) is not multiplied
        bias = self._param("bias_hh", name)
        if h is None:
            return bias.expand(gi.shape) if bias is not None else gi.zeros_like()
        gh = h @ self._param("weight_hh", name).T  # type: ignore[union-attr]
        return gh + bias if bias is not None else gh

    def _state_sizes(self) -> tuple[int, ...]:
        return (self.proj_size or self.hidden_size,)

    def _run(
        self, x: Tensor | PackedSequence, hx: tuple[Tensor, ...] | None
    ) -> tuple[Tensor | PackedSequence, tuple[Tensor, ...]]:
        """Check and shape the input and the initial states, run every layer and direction, shape the results.

        x: (L, N, H_in), (N, L, H_in) with batch_first, unbatched (L, H_in), or a PackedSequence; hx: each state
        (D * layers, N, size) or unbatched (D * layers, size), or None for zeros. Returns the output and the final
        states, in the input's form (a PackedSequence's output is one too, its final states in its batch's order).
        """
        name = type(self).__name__
        packed = x if isinstance(x, PackedSequence) else None
        if packed is not None:
            self._check_dtype(packed.data, "input")
            if packed.data.ndim != 2 or packed.data.shape[-1] != self.input_size:
                raise ShapeError(
                    f"{name}: a PackedSequence's data must be (steps, input_size {self.input_size}), got "
                    f"{packed.data.shape}"
                )
            # padded, in the packed (longest first) order: a sequence's steps are the first `lengths[b]`
            x, lengths_t = pad_packed_sequence(PackedSequence(packed.data, packed.batch_sizes))
            lengths = [int(n) for n in lengths_t.tolist()]
        else:
            if hasattr(x, "batch_sizes"):
                raise TypeError(
                    f"{name}: a packed input must be uopkit.nn.utils.rnn's PackedSequence (pack_padded_sequence, "
                    f"pack_sequence), got {type(x).__module__}.{type(x).__name__}"
                )
            _refuse_packed(name, x)
            self._check_dtype(x, "input")
        if x.ndim not in (2, 3):
            raise ShapeError(f"{name}: expected a 2-d (unbatched) or 3-d input, got shape {x.shape}")
        if x.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: the input's last axis must be input_size {self.input_size}, got {x.shape}")
        batched = x.ndim == 3
        if not batched:
            x = x.unsqueeze(1)
        elif self.batch_first and packed is None:
            x = x.transpose(0, 1)
        steps, batch = x.shape[0], x.shape[1]
        if steps == 0:
            raise ShapeError(f"{name}: the sequence must have at least one step, got input {x.shape}")
        stacked = self.num_layers * self._directions
        states = (
            None
            if hx is None
            else tuple(
                self._check_state(h, batched, (stacked, batch, size), i)
                for i, (h, size) in enumerate(zip(hx, self._state_sizes(), strict=True))
            )
        )
        # a packed batch's masks (steps, N, 1): whether step t is one of sequence b's (a stored buffer each step reads
        # a window of, so the masked steps are one kernel); None where every sequence runs every step
        masks, running = None, [batch] * steps
        if packed is not None:
            running = [int(n) for n in packed.batch_sizes.tolist()]
            if packed.sorted_indices is not None and states is not None:
                states = tuple(s.index_select(1, packed.sorted_indices.to(s.device)) for s in states)
            if min(lengths) < steps:
                valid = np.arange(steps)[:, None, None] < np.array(lengths)[None, :, None]
                masks = Tensor(valid, device=x.device)
        finals: list[list[Tensor]] = [[] for _ in self._state_sizes()]
        for layer in range(self.num_layers):
            if layer > 0:
                # between layers only, and only under Tensor.training (as torch's, which follows module.train())
                x = x.dropout(self.dropout)
            outputs = []
            for direction, suffix in enumerate(self._suffixes()):
                pname = f"l{layer}{suffix}"
                index = layer * self._directions + direction
                state: tuple[Tensor | None, ...] = (
                    tuple(s[index] for s in states) if states is not None else (None,) * len(finals)
                )
                # the input projections of every step at once: one matmul
                gi = x @ self._param("weight_ih", pname).T  # type: ignore[union-attr]
                bias = self._param("bias_ih", pname)
                if bias is not None:
                    gi = gi + bias
                # stored once: each step reads its window at a launch-time start (`schedule/windows.py`), so the
                # steps' kernels are one compiled kernel, not one per step with its offset written in
                gi = gi.contiguous()
                order = range(steps - 1, -1, -1) if suffix else range(steps)
                per_step: list[Tensor] = [x] * steps
                for t in order:
                    new = self._step(gi[t], state, pname)
                    if masks is not None and running[t] < batch:
                        # a sequence that ended (or, reversed, hasn't begun) keeps its state
                        new = tuple(
                            masks[t].where(n, s if s is not None else n.zeros_like())
                            for n, s in zip(new, state, strict=True)
                        )
                    # (each step's state stored: left lazy, step t's kernel recomputed the whole chain before it, a
                    # kernel of its own per step, O(T^2) work; and its gradient too, so the backward's chain is cut at
                    # every step, not wherever its fused depth runs out: kernels that differ from step to step)
                    state = tuple(_gradient_stored_once(s).contiguous() for s in new)
                    per_step[t] = state[0]  # type: ignore[assignment]
                # (its gradient stored too: a loss computed from the output elementwise, `out.square().mean()`, gave
                # each step's backward kernel a slice of that formula, read at an offset written into the kernel)
                outputs.append(_gradient_stored_once(Tensor.stack(per_step, dim=0)))
                for final, s in zip(finals, state, strict=True):
                    final.append(s)  # type: ignore[arg-type]
            x = outputs[0] if len(outputs) == 1 else Tensor.cat(outputs, dim=-1)
        final_states = tuple(Tensor.stack(f, dim=0) for f in finals)
        if packed is not None:
            if packed.unsorted_indices is not None:
                final_states = tuple(s.index_select(1, packed.unsorted_indices.to(s.device)) for s in final_states)
            data = pack_padded_sequence(x, lengths).data
            output = PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
            return output, final_states
        if not batched:
            return x.squeeze(1), tuple(s.squeeze(1) for s in final_states)
        return (x.transpose(0, 1) if self.batch_first else x), final_states

    def _check_state(self, h: Any, batched: bool, shape: tuple[int, int, int], index: int) -> Tensor:
        name = type(self).__name__
        if not isinstance(h, Tensor):
            raise TypeError(f"{name}: the initial state must be a Tensor, got {type(h).__name__}")
        want = shape if batched else (shape[0], shape[2])
        if h.shape != want:
            form = "batched" if batched else "unbatched"
            raise ShapeError(f"{name}: expected an initial state of shape {want} for a {form} input, got {h.shape}")
        self._check_dtype(h, ("h0", "c0")[index])
        return h if batched else h.unsqueeze(1)

    def _check_dtype(self, x: Tensor, what: str) -> None:
        # (an initial state of another dtype fails in torch's matmul; named here)
        _check_weight_dtype(self, self.weight_ih_l0, x, what)


class RNN(_RNNBase):
    """torch.nn.RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (nonlinearity "tanh" or "relu") over a
    sequence, for `num_layers` stacked layers, each one or two (bidirectional) directions.

    Call with an input (L, N, H_in) ((N, L, H_in) with batch_first, or unbatched (L, H_in)) and an optional h0
    (D * num_layers, N, H); returns (output (L, N, D * H), h_n (D * num_layers, N, H)). `dropout` drops each layer's
    output but the last in training mode.

    >>> out, h = RNN(3, 4, bidirectional=True, batch_first=True)(Tensor.ones(2, 5, 3))
    >>> out.shape, h.shape
    ((2, 5, 8), (2, 2, 4))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)

    def _step(self, gi: Tensor, state: tuple[Tensor | None, ...], name: str) -> tuple[Tensor, ...]:
        pre = gi + self._hidden_projection(gi, state[0], name)
        return (pre.tanh() if self.nonlinearity == "tanh" else pre.relu(),)

    def __call__(self, input: Tensor | PackedSequence, hx: Tensor | None = None) -> tuple[Any, Tensor]:
        out, (h,) = self._run(input, None if hx is None else (hx,))
        return out, h


class LSTM(_RNNBase):
    """torch.nn.LSTM: LSTMCell's step (gates input, forget, cell, output) over a sequence, stacked and optionally
    bidirectional as RNN. With proj_size > 0 each step's h is projected by weight_hr (proj_size, hidden_size): h and
    the output have proj_size features, c keeps hidden_size (torch's LSTM with projections).

    Call with an input as RNN's and an optional (h0, c0); returns (output, (h_n, c_n)).

    >>> out, (h, c) = LSTM(3, 4, proj_size=2)(Tensor.ones(5, 3))
    >>> out.shape, h.shape, c.shape
    ((5, 2), (1, 2), (1, 4))
    """

    gates = 4

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
    ) -> None:
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, proj_size)

    def _state_sizes(self) -> tuple[int, ...]:
        return (self.proj_size or self.hidden_size, self.hidden_size)

    def _step(self, gi: Tensor, state: tuple[Tensor | None, ...], name: str) -> tuple[Tensor, ...]:
        h, c = state
        i, f, g, o = (gi + self._hidden_projection(gi, h, name)).chunk(4, -1)
        new = i.sigmoid() * g.tanh()
        c = f.sigmoid() * c + new if c is not None else new
        h = o.sigmoid() * c.tanh()
        projection = self._param("weight_hr", name)
        return (h @ projection.T if projection is not None else h), c

    def __call__(
        self, input: Tensor | PackedSequence, hx: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Any, tuple[Tensor, Tensor]]:
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError("LSTM: the initial state must be a tuple (h0, c0)")
        out, (h, c) = self._run(input, None if hx is None else tuple(hx))
        return out, (h, c)


class GRU(_RNNBase):
    """torch.nn.GRU: GRUCell's step (gates reset, update, new; n = tanh(gi_n + r * (h W_hn^T + b_hn))) over a
    sequence, stacked and optionally bidirectional as RNN.

    Call with an input as RNN's and an optional h0; returns (output, h_n).

    >>> out, h = GRU(3, 4, num_layers=2)(Tensor.ones(5, 2, 3))
    >>> out.shape, h.shape
    ((5, 2, 4), (2, 2, 4))
    """

    gates = 3

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
    ) -> None:
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)

    def _step(self, gi: Tensor, state: tuple[Tensor | None, ...], name: str) -> tuple[Tensor, ...]:
        (h,) = state
        ir, iz, inn = gi.chunk(3, -1)
        hr, hz, hn = self._hidden_projection(gi, h, name).chunk(3, -1)
        r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
        n = (inn + r * hn).tanh()
        return ((1 - z) * n + z * h if h is not None else (1 - z) * n,)

    def __call__(self, input: Tensor | PackedSequence, hx: Tensor | None = None) -> tuple[Any, Tensor]:
        out, (h,) = self._run(input, None if hx is None else (hx,))
        return out, h


# ---------------------------------------------------------------------------------------------------------------------
# attention


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    # torch's fan_in, fan_out: axis 1 and axis 0, times the size of the axes after them
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _xavier_uniform(shape: tuple[int, ...]) -> Tensor:
    fan_in, fan_out = _fans(shape)
    return _uniform(shape, math.sqrt(6 / (fan_in + fan_out)))


def _xavier_normal(shape: tuple[int, ...]) -> Tensor:
    fan_in, fan_out = _fans(shape)
    return _host(Tensor._rng().normal(0.0, math.sqrt(2 / (fan_in + fan_out)), shape))


def _additive_mask(mask: Tensor, name: str, op: str = "MultiheadAttention") -> Tensor:
    # torch's convention: a bool mask is True where attending is not allowed (-inf), a float mask is added
    if mask.dtype == dtypes.bool:
        return mask.where(-math.inf, 0.0)
    if not dtypes.is_float(mask.dtype):
        raise TypeError(f"{op}: {name} must be a bool or float tensor, got {mask.dtype}")
    return mask


class NonDynamicallyQuantizableLinear(Linear):
    """A Linear by torch's name for MultiheadAttention's out_proj (one that dynamic quantization leaves alone): the
    attention prints as torch's."""


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: project query, key and value, attend in `num_heads` heads of embed_dim //
    num_heads, concatenate and project by `out_proj`.

    Inputs (L, N, E) (or (N, L, E) with batch_first, or unbatched (L, E)); key and value (S, N, kdim/vdim).
    `key_padding_mask` (N, S) and `attn_mask` (L, S) or (N * num_heads, L, S): bool (True: not allowed) or float
    (added to the scores). Returns (output, weights) with weights (N, L, S) averaged over heads or (N, num_heads, L, S),
    or None when not need_weights. The weights are dropped (p=dropout) in training mode, as torch's.

    >>> mha = MultiheadAttention(8, 2, batch_first=True)
    >>> x = Tensor.ones(2, 3, 8)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape
    ((2, 3, 8), (2, 3, 3))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
    ) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"MultiheadAttention: embed_dim and num_heads must be positive, got {embed_dim}, {num_heads}"
            )
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self.dropout, self.batch_first, self.add_zero_attn = dropout, batch_first, add_zero_attn
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        # torch's initialization: Xavier-uniform projections, zero biases; out_proj's weight as a Linear's
        if self._qkv_same_embed_dim:
            self.in_proj_weight = _xavier_uniform((3 * embed_dim, embed_dim))
        else:
            self.q_proj_weight = _xavier_uniform((embed_dim, embed_dim))
            self.k_proj_weight = _xavier_uniform((embed_dim, self.kdim))
            self.v_proj_weight = _xavier_uniform((embed_dim, self.vdim))
        self.in_proj_bias = _host(np.zeros(3 * embed_dim)) if bias else None
        self.bias_k = _xavier_normal((1, 1, embed_dim)) if add_bias_kv else None
        self.bias_v = _xavier_normal((1, 1, embed_dim)) if add_bias_kv else None
        # (last: torch's state dict lists a module's own parameters before its submodules')
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias)
        if bias:
            self.out_proj.bias = _host(np.zeros(embed_dim))

    def __call__(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        for t in (query, key, value):
            _refuse_packed("MultiheadAttention", t)
        _check_attention_inputs("MultiheadAttention", query, key, value, (self.embed_dim, self.kdim, self.vdim))
        _check_causal_hint("MultiheadAttention", is_causal, attn_mask)
        batched = query.ndim == 3
        if batched and self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if self._qkv_same_embed_dim:
            wq, wk, wv = self.in_proj_weight.chunk(3, 0)
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        out, weights = _attention(
            "MultiheadAttention", query, key, value, self.num_heads, (wq, wk, wv), self.in_proj_bias,
            (self.bias_k, self.bias_v), self.add_zero_attn, self.dropout if Tensor.training else 0.0,
            (self.out_proj.weight, self.out_proj.bias), key_padding_mask, need_weights, attn_mask,
            average_attn_weights,
        )  # fmt: skip
        if batched and self.batch_first:
            out = out.transpose(0, 1)
        return out, weights


def _check_attention_inputs(name: str, query: Tensor, key: Tensor, value: Tensor, features: tuple[int, ...]) -> None:
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise ShapeError(
            f"{name}: query, key and value must all be 3-d (batched) or 2-d (unbatched), got "
            f"{query.shape}, {key.shape}, {value.shape}"
        )
    if (query.shape[-1], key.shape[-1], value.shape[-1]) != features:
        raise ShapeError(
            f"{name}: expected features {', '.join(map(str, features))} in query, key and value, got "
            f"{query.shape}, {key.shape}, {value.shape}"
        )


def _check_causal_hint(name: str, is_causal: bool, attn_mask: Tensor | None) -> None:
    if is_causal and attn_mask is None:
        # (torch's: is_causal is a hint about attn_mask, which must be given)
        raise ArgumentError(
            f"{name}: is_causal=True needs attn_mask (the causal mask itself); build it with "
            "Transformer.generate_square_subsequent_mask"
        )


def _attention_mask(
    name: str, attn_mask: Tensor | None, key_padding_mask: Tensor | None, heads: int, L: int, S: int, N: int,
    batched: bool,
) -> Tensor | None:  # fmt: skip
    # one additive mask broadcastable to the scores (N, heads, L, S)
    mask = None
    if attn_mask is not None:
        stacked = N * heads if batched else heads
        if attn_mask.shape == (L, S):
            mask = _additive_mask(attn_mask, "attn_mask", name).reshape(1, 1, L, S)
        elif attn_mask.shape == (stacked, L, S):
            mask = _additive_mask(attn_mask, "attn_mask", name).reshape(N, heads, L, S)
        else:
            raise ShapeError(f"{name}: attn_mask must be ({L}, {S}) or ({stacked}, {L}, {S}), got {attn_mask.shape}")
    if key_padding_mask is not None:
        want = (N, S) if batched else (S,)
        if key_padding_mask.shape != want:
            raise ShapeError(f"{name}: key_padding_mask must be {want}, got {key_padding_mask.shape}")
        padding = _additive_mask(key_padding_mask, "key_padding_mask", name).reshape(N, 1, 1, S)
        mask = padding if mask is None else mask + padding
    return mask


def _attention(
    name: str,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    heads: int,
    proj_weights: tuple[Tensor, Tensor, Tensor],
    in_proj_bias: Tensor | None,
    bias_kv: tuple[Tensor | None, Tensor | None],
    add_zero_attn: bool,
    dropout_p: float,
    out_proj: tuple[Tensor, Tensor | None],
    key_padding_mask: Tensor | None,
    need_weights: bool,
    attn_mask: Tensor | None,
    average_attn_weights: bool,
    static_kv: tuple[Tensor | None, Tensor | None] = (None, None),
) -> tuple[Tensor, Tensor | None]:
    # multi-head attention over sequence-first inputs (L, N, E) or unbatched (L, E), shapes checked by the caller;
    # what MultiheadAttention and F.multi_head_attention_forward share
    batched = query.ndim == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    L, N, E = query.shape
    head_dim = E // heads
    if key.shape[:2] != value.shape[:2] or key.shape[1] != N:
        raise ShapeError(
            f"{name}: key {key.shape} and value {value.shape} must have the same length and the query's batch {N}"
        )
    static_k, static_v = static_kv
    S = key.shape[0] if static_k is None else static_k.shape[1]
    mask = _attention_mask(name, attn_mask, key_padding_mask, heads, L, S, N, batched)
    wq, wk, wv = proj_weights
    q, k, v = query @ wq.T, key @ wk.T, value @ wv.T
    if in_proj_bias is not None:
        bq, bk, bv = in_proj_bias.chunk(3, 0)
        q, k, v = q + bq, k + bk, v + bv
    bias_k, bias_v = bias_kv
    if bias_k is not None and bias_v is not None:
        # one more key and value, learned, that every query may attend to
        k = Tensor.cat([k, bias_k.expand((1, N, E))], dim=0)
        v = Tensor.cat([v, bias_v.expand((1, N, E))], dim=0)
        mask = mask.pad(((0, 0), (0, 0), (0, 0), (0, 1))) if mask is not None else None
    # (N, heads, length, head_dim); a static key or value (N * heads, S, head_dim) replaces the projected one
    q, k, v = (t.reshape(t.shape[0], N, heads, head_dim).permute((1, 2, 0, 3)) for t in (q, k, v))
    if static_k is not None:
        k = static_k.reshape(N, heads, S, head_dim)
    if static_v is not None:
        v = static_v.reshape(N, heads, static_v.shape[1], head_dim)
    if add_zero_attn:
        # and one more of zeros
        zeros = Tensor.zeros(N, heads, 1, head_dim, dtype=k.dtype, device=k.device)
        k, v = Tensor.cat([k, zeros], dim=2), Tensor.cat([v, zeros], dim=2)
        mask = mask.pad(((0, 0), (0, 0), (0, 0), (0, 1))) if mask is not None else None
    weights = None
    if need_weights:
        # torch's path with weights: a query that may attend to nothing gives NaN, as there
        scores = (q * (1 / math.sqrt(head_dim))) @ k.transpose(-2, -1)
        if mask is not None and scores.dtype in dtypes.halves:
            # (a half-float attention, or one under autocast, adds its mask in the scores' dtype, as torch's)
            mask = mask.cast(scores.dtype)
        probs = (scores + mask if mask is not None else scores).softmax(-1)
        if dropout_p > 0:
            with Tensor.train():
                probs = probs.dropout(dropout_p)
        out = probs @ v
        weights = probs.mean(1) if average_attn_weights else probs
        if not batched:
            weights = weights.squeeze(0)
    else:
        # torch's path without weights (scaled_dot_product_attention): such a query gives zeros
        out = q.scaled_dot_product_attention(k, v, mask, dropout_p)
    out_weight, out_bias = out_proj
    out = out.permute((2, 0, 1, 3)).reshape(L, N, E).linear(out_weight.T, out_bias)
    return (out if batched else out.squeeze(1)), weights


def multi_head_attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight: Tensor | None,
    in_proj_bias: Tensor | None,
    bias_k: Tensor | None,
    bias_v: Tensor | None,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    training: bool = True,
    key_padding_mask: Tensor | None = None,
    need_weights: bool = True,
    attn_mask: Tensor | None = None,
    use_separate_proj_weight: bool = False,
    q_proj_weight: Tensor | None = None,
    k_proj_weight: Tensor | None = None,
    v_proj_weight: Tensor | None = None,
    static_k: Tensor | None = None,
    static_v: Tensor | None = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """torch.nn.functional.multi_head_attention_forward: MultiheadAttention's computation with its weights passed in;
    inputs sequence-first (L, N, E) or unbatched (L, E), the weights' shapes as MultiheadAttention's parameters.
    `static_k`/`static_v` (N * num_heads, S, E // num_heads) replace the projected key/value; dropout only when
    `training`. Returns (output, weights) as MultiheadAttention.

    >>> w = Tensor.eye(4).repeat(3, 1)
    >>> out, weights = multi_head_attention_forward(
    ...     Tensor.ones(3, 1, 4), Tensor.ones(5, 1, 4), Tensor.ones(5, 1, 4), 4, 2, w, None, None, None, False, 0.0,
    ...     Tensor.eye(4), None)
    >>> out.shape, weights.shape
    ((3, 1, 4), (1, 3, 5))
    """
    name = "multi_head_attention_forward"
    if embed_dim_to_check % num_heads:
        raise ArgumentError(f"{name}: embed_dim {embed_dim_to_check} must be divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if q_proj_weight is None or k_proj_weight is None or v_proj_weight is None:
            raise ArgumentError(
                f"{name}: use_separate_proj_weight=True needs q_proj_weight, k_proj_weight and v_proj_weight"
            )
        proj_weights = (q_proj_weight, k_proj_weight, v_proj_weight)
    else:
        if in_proj_weight is None:
            raise ArgumentError(f"{name}: in_proj_weight is None; pass it or use_separate_proj_weight=True")
        proj_weights = tuple(in_proj_weight.chunk(3, 0))
    kdim, vdim = proj_weights[1].shape[-1], proj_weights[2].shape[-1]
    _check_attention_inputs(name, query, key, value, (embed_dim_to_check, kdim, vdim))
    _check_causal_hint(name, is_causal, attn_mask)
    if (static_k is not None or static_v is not None) and bias_k is not None:
        raise ArgumentError(f"{name}: bias_k/bias_v cannot be added to a static key or value")
    return _attention(
        name, query, key, value, num_heads, proj_weights, in_proj_bias, (bias_k, bias_v), add_zero_attn,
        dropout_p if training else 0.0, (out_proj_weight, out_proj_bias), key_padding_mask, need_weights, attn_mask,
        average_attn_weights, (static_k, static_v),
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# transformer


def _activation(activation: str | Callable[[Tensor], Tensor], layer: str) -> Callable[[Tensor], Tensor]:
    if activation == "relu":
        return Tensor.relu
    if activation == "gelu":
        return Tensor.gelu
    if isinstance(activation, str) or not callable(activation):
        raise ArgumentError(f"{layer}: activation must be 'relu', 'gelu' or a callable, got {activation!r}")
    return activation


class _TransformerLayer(Module):
    # what both Transformer layers share: the feed-forward block (linear1 -> activation -> dropout -> linear2 -> a last
    # dropout of the layer's own) and the attention block (attention, then dropout)
    def _init_feed_forward(
        self, d_model: int, dim_feedforward: int, dropout: float, activation: Any, bias: bool, layer: str
    ) -> None:
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.activation = _activation(activation, layer)

    def _ff_block(self, x: Tensor, dropout: Dropout) -> Tensor:
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _attention_block(
        self,
        attention: MultiheadAttention,
        dropout: Dropout,
        x: Tensor,
        mem: Tensor,
        mask: Tensor | None,
        padding: Tensor | None,
        is_causal: bool,
    ) -> Tensor:
        out, _ = attention(
            x, mem, mem, attn_mask=mask, key_padding_mask=padding, need_weights=False, is_causal=bool(is_causal)
        )
        return dropout(out)


def _check_model_input(layer: str, x: Any, d_model: int, name: str) -> None:
    _refuse_packed(layer, x)
    if x.ndim not in (2, 3) or x.shape[-1] != d_model:
        raise ShapeError(
            f"{layer}: {name} must be (L, N, {d_model}), (N, L, {d_model}) or (L, {d_model}), got {x.shape}"
        )


class TransformerEncoderLayer(_TransformerLayer):
    """torch.nn.TransformerEncoderLayer: self-attention then a feed-forward block, each with a residual connection and
    a LayerNorm after it (or before it, with norm_first). `activation` is "relu", "gelu" or a callable.

    Call with src (L, N, d_model) ((N, L, d_model) with batch_first, or unbatched (L, d_model)) and optional src_mask
    and src_key_padding_mask as MultiheadAttention's attn_mask and key_padding_mask; is_causal is torch's hint that
    src_mask is the causal mask (which must then be given).

    >>> TransformerEncoderLayer(8, 2, dim_feedforward=16)(Tensor.ones(3, 2, 8)).shape
    (3, 2, 8)
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        self._init_feed_forward(d_model, dim_feedforward, dropout, activation, bias, "TransformerEncoderLayer")
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)

    def __call__(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        _check_model_input("TransformerEncoderLayer", src, self.self_attn.embed_dim, "src")
        x = src
        if self.norm_first:
            h = self.norm1(x)
            x = x + self._attention_block(
                self.self_attn, self.dropout1, h, h, src_mask, src_key_padding_mask, is_causal
            )
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(
            x + self._attention_block(self.self_attn, self.dropout1, x, x, src_mask, src_key_padding_mask, is_causal)
        )
        return self.norm2(x + self._ff_block(x, self.dropout2))


class TransformerDecoderLayer(_TransformerLayer):
    """torch.nn.TransformerDecoderLayer: self-attention over the target, attention from the target to the encoder's
    output (memory), then a feed-forward block; residuals and LayerNorms as TransformerEncoderLayer.

    Call with tgt (T, N, d_model) and memory (S, N, d_model) (batch first or unbatched as the encoder layer), and the
    optional tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal.

    >>> layer = TransformerDecoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    >>> layer(Tensor.ones(2, 3, 8), Tensor.ones(2, 4, 8)).shape
    (2, 3, 8)
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        self._init_feed_forward(d_model, dim_feedforward, dropout, activation, bias, "TransformerDecoderLayer")
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)

    def __call__(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        d_model = self.self_attn.embed_dim
        _check_model_input("TransformerDecoderLayer", tgt, d_model, "tgt")
        _check_model_input("TransformerDecoderLayer", memory, d_model, "memory")
        x = tgt

        def self_attention(h: Tensor) -> Tensor:
            return self._attention_block(
                self.self_attn, self.dropout1, h, h, tgt_mask, tgt_key_padding_mask, tgt_is_causal
            )

        def cross_attention(h: Tensor) -> Tensor:
            return self._attention_block(
                self.multihead_attn, self.dropout2, h, memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )

        if self.norm_first:
            x = x + self_attention(self.norm1(x))
            x = x + cross_attention(self.norm2(x))
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + self_attention(x))
        x = self.norm2(x + cross_attention(x))
        return self.norm3(x + self._ff_block(x, self.dropout3))


def _clones(layer: Any, num_layers: int, name: str) -> ModuleList:
    if not isinstance(num_layers, int) or num_layers < 0:
        raise ValueError(f"{name}: num_layers must be a non-negative int, got {num_layers!r}")
    # independent copies with the same starting weights, as torch's (its Transformer re-initializes them), in a
    # ModuleList as torch's, so `layers` is a module of its own (named_modules, get_submodule, isinstance)
    return ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder: `num_layers` deep copies of `encoder_layer` (named layers.0, layers.1, ...) applied
    in turn, then the optional `norm`. enable_nested_tensor and mask_check are accepted and ignored (torch's fast path
    for padded batches; here padded positions are computed as any other, where torch's fast path gives zeros).

    >>> enc = TransformerEncoder(TransformerEncoderLayer(8, 2, dim_feedforward=16), num_layers=2)
    >>> enc(Tensor.ones(3, 2, 8)).shape
    (3, 2, 8)
    """

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Callable[[Tensor], Tensor] | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        self.layers = _clones(encoder_layer, num_layers, "TransformerEncoder")
        self.num_layers, self.norm = num_layers, norm
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check

    def __call__(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        # (is_causal None: torch's detection of a causal mask; the mask is applied as given either way)
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Module):
    """torch.nn.TransformerDecoder: `num_layers` deep copies of `decoder_layer` (layers.0, ...), each given the same
    memory and masks, then the optional `norm`.

    >>> dec = TransformerDecoder(TransformerDecoderLayer(8, 2, dim_feedforward=16), num_layers=2)
    >>> dec(Tensor.ones(3, 2, 8), Tensor.ones(4, 2, 8)).shape
    (3, 2, 8)
    """

    def __init__(
        self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Callable[[Tensor], Tensor] | None = None
    ) -> None:
        self.layers = _clones(decoder_layer, num_layers, "TransformerDecoder")
        self.num_layers, self.norm = num_layers, norm

    def __call__(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal),
                memory_is_causal=memory_is_causal,
            )
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """torch.nn.Transformer: an encoder (num_encoder_layers layers and a final LayerNorm) and a decoder (likewise),
    every parameter with more than one axis re-initialized Xavier-uniform, as torch's. custom_encoder/custom_decoder
    replace the built ones.

    Call with src (S, N, d_model) and tgt (T, N, d_model) (batch first or unbatched as the layers) and the masks of
    the encoder and decoder; returns (T, N, d_model).

    >>> model = Transformer(8, 2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    >>> mask = Transformer.generate_square_subsequent_mask(3)
    >>> model(Tensor.ones(4, 2, 8), Tensor.ones(3, 2, 8), tgt_mask=mask).shape
    (3, 2, 8)
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        custom_encoder: Any = None,
        custom_decoder: Any = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
            self.encoder = TransformerEncoder(TransformerEncoderLayer(*args), num_encoder_layers, norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
            self.decoder = TransformerDecoder(TransformerDecoderLayer(*args), num_decoder_layers, norm)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        # torch's _reset_parameters: Xavier-uniform for every matrix (the copied layers then differ)
        fresh = {k: _xavier_uniform(t.shape) for k, t in get_state_dict(self).items() if t.ndim > 1}
        load_state_dict(self, fresh, strict=False)

    def __call__(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        _check_model_input("Transformer", src, self.d_model, "src")
        _check_model_input("Transformer", tgt, self.d_model, "tgt")
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and (tgt.ndim != 3 or src.shape[batch_axis] != tgt.shape[batch_axis]):
            raise ShapeError(f"Transformer: src {src.shape} and tgt {tgt.shape} must have the same batch size")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: str | None = None, dtype: Any = None) -> Tensor:
        """The causal mask (sz, sz): 0.0 on and below the diagonal, -inf above it (a float mask, as torch's).

        >>> Transformer.generate_square_subsequent_mask(2).tolist()
        [[0.0, -inf], [0.0, 0.0]]
        """
        values = np.triu(np.full((sz, sz), -np.inf, dtype=np.float32), 1)
        mask = Tensor(values, device=device).reshape(sz, sz)
        return mask.cast(dtype) if dtype is not None else mask
