"""uopkit.nn's sequence layers (RNN, LSTM, GRU, MultiheadAttention, the Transformer layers) against torch.nn: torch's
state dict loaded as it is, the same inputs, the same outputs, states and gradients. Sizes and sequence lengths are
small: every step of a recurrent layer is part of the graph, and every new kernel is compiled."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest

import uopkit.nn as nn
from uopkit import Tensor, dtypes
from uopkit.nn.state import get_state_dict, load_state_dict
from uopkit.tensor import ArgumentError, ShapeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
ATOL = 1e-5


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _twin(name: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """Our layer and torch's, built with the same arguments; torch's weights copied into ours through its state dict
    (whose keys must be ours)."""
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    ours = getattr(nn, name)(*args, **kwargs)
    assert list(get_state_dict(ours)) == list(theirs.state_dict())
    load_state_dict(ours, {k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _close(got: Tensor, want: Any, atol: float = ATOL) -> None:
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=atol)


# ---------------------------------------------------------------------------------------------------------------------
# recurrent layers


# (torch's LSTM with projections warns that oneDNN can't run it)
@pytest.mark.filterwarnings("ignore:LSTM with projections")
@pytest.mark.parametrize(
    "name, kwargs, batched, with_state",
    [
        ("RNN", {"num_layers": 2, "nonlinearity": "relu"}, True, True),
        ("RNN", {"bidirectional": True, "batch_first": True}, True, False),
        ("GRU", {"num_layers": 2, "bidirectional": True}, True, True),
        ("GRU", {"bias": False}, False, True),
        ("LSTM", {"proj_size": 2, "batch_first": True}, True, True),
        ("LSTM", {}, False, False),
    ],
)
def test_recurrent_layers_match_torch(name: str, kwargs: dict[str, Any], batched: bool, with_state: bool) -> None:
    ours, theirs = _twin(name, 3, 4, **kwargs)
    steps, batch = 3, 2
    directions = 2 if kwargs.get("bidirectional") else 1
    stacked, out_size = kwargs.get("num_layers", 1) * directions, kwargs.get("proj_size") or 4
    x = _randn(batch, steps, 3) if kwargs.get("batch_first") else _randn(steps, batch, 3)
    if not batched:
        x = x[:, 0]
    state_shape = (stacked, batch) if batched else (stacked,)
    states = [_randn(*state_shape, out_size)]
    if name == "LSTM":
        states.append(_randn(*state_shape, 4))
    hx: Any = None
    hx_t: Any = None
    if with_state:
        hx = tuple(Tensor(s) for s in states) if name == "LSTM" else Tensor(states[0])
        hx_t = tuple(torch.tensor(s) for s in states) if name == "LSTM" else torch.tensor(states[0])
    out, h = ours(Tensor(x), hx)
    want_out, want_h = theirs(torch.tensor(x), hx_t)
    assert out.shape == tuple(want_out.shape)
    _close(out, want_out)
    if name == "LSTM":
        for got, want in zip(h, want_h, strict=True):
            assert got.shape == tuple(want.shape)
            _close(got, want)
    else:
        assert h.shape == tuple(want_h.shape)
        _close(h, want_h)


def test_bidirectional_lstm_outputs_and_gradients_match_torch() -> None:
    ours, theirs = _twin("LSTM", 3, 4, bidirectional=True)
    x, h0, c0 = _randn(2, 2, 3), _randn(2, 2, 4), _randn(2, 2, 4)
    xs = [Tensor(x, requires_grad=True), Tensor(h0, requires_grad=True), Tensor(c0, requires_grad=True)]
    ts = [torch.tensor(a, requires_grad=True) for a in (x, h0, c0)]
    out, (h, c) = ours(xs[0], (xs[1], xs[2]))
    want_out, (want_h, want_c) = theirs(ts[0], (ts[1], ts[2]))
    for got, want in ((out, want_out), (h, want_h), (c, want_c)):
        _close(got, want)
    # weighted, so that each output and state gets a gradient of its own
    (out * out).sum().add(h.sum() * 2).add(c.sum() * 3).backward()
    ((want_out * want_out).sum() + want_h.sum() * 2 + want_c.sum() * 3).backward()
    for got, want in zip(xs, ts, strict=True):
        _close(got.grad, want.grad)
    params = get_state_dict(ours)
    for k, want in theirs.named_parameters():
        _close(params[k].grad, want.grad)


def test_recurrent_dropout_between_layers_under_training() -> None:
    # p=1 zeros the first layer's output: the second layer sees zeros (deterministic, so comparable with torch)
    ours, theirs = _twin("GRU", 3, 4, num_layers=2, dropout=1.0)
    x = _randn(3, 2, 3)
    theirs.train()
    out, h = ours(Tensor(x))
    want_out, want_h = theirs(torch.tensor(x))
    _close(out, want_out)
    _close(h, want_h)
    # and nothing is dropped in eval mode
    theirs.eval()
    _close(ours.eval()(Tensor(x))[0], theirs(torch.tensor(x))[0])


def test_recurrent_initialization_and_repr() -> None:
    lstm = nn.LSTM(3, 16, num_layers=2, bidirectional=True, proj_size=4)
    shapes = {k: v.shape for k, v in get_state_dict(lstm).items()}
    want = {k: tuple(v.shape) for k, v in torch.nn.LSTM(3, 16, 2, bidirectional=True, proj_size=4).state_dict().items()}
    assert shapes == want
    values = np.concatenate([v.numpy().ravel() for v in get_state_dict(lstm).values()])
    assert np.abs(values).max() <= 1 / 4 and values.std() > 0.1
    assert all(v.requires_grad for v in get_state_dict(lstm).values())
    assert {"RNN", "LSTM", "GRU", "MultiheadAttention", "Transformer"} <= set(nn.__all__)
    assert repr(nn.GRU(3, 4, batch_first=True)) == "GRU(3, 4, batch_first=True)"


def test_recurrent_errors() -> None:
    lstm = nn.LSTM(3, 4)
    packed = namedtuple("PackedSequence", "data batch_sizes sorted_indices unsorted_indices")
    with pytest.raises(TypeError, match="PackedSequence"):
        lstm(packed(Tensor.ones(5, 3), Tensor([3, 2]), None, None))
    with pytest.raises(ShapeError, match="input_size"):
        lstm(Tensor.ones(4, 2, 5))
    with pytest.raises(ShapeError, match="2-d"):
        lstm(Tensor.ones(4, 2, 1, 3))
    with pytest.raises(ShapeError, match="initial state"):
        lstm(Tensor.ones(4, 2, 3), (Tensor.zeros(1, 3, 4), Tensor.zeros(1, 3, 4)))
    with pytest.raises(ShapeError, match="unbatched"):
        nn.GRU(3, 4)(Tensor.ones(4, 3), Tensor.zeros(1, 1, 4))
    with pytest.raises(TypeError, match=r"\(h0, c0\)"):
        lstm(Tensor.ones(4, 2, 3), Tensor.zeros(1, 2, 4))
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="dropout"):
        nn.GRU(3, 4, dropout=1.5)
    with pytest.warns(UserWarning, match="num_layers=1"):
        nn.RNN(3, 4, dropout=0.5)


def test_recurrent_dtype_errors_as_torch() -> None:
    # torch refuses an input (ValueError) or an initial state (a matmul's RuntimeError) of another dtype than the
    # weights; they were promoted, the whole run in float64
    gru, lstm = nn.GRU(3, 4), nn.LSTM(3, 4)
    with pytest.raises(ArgumentError, match=r"input dtype \(dtypes.double\) does not match weight dtype"):
        gru(Tensor.ones(5, 2, 3, dtype=dtypes.float64))
    with pytest.raises(ArgumentError, match="h0 dtype"):
        gru(Tensor.ones(5, 2, 3), Tensor.zeros(1, 2, 4, dtype=dtypes.float64))
    with pytest.raises(ArgumentError, match="c0 dtype"):
        lstm(Tensor.ones(5, 2, 3), (Tensor.zeros(1, 2, 4), Tensor.zeros(1, 2, 4, dtype=dtypes.float64)))
    with pytest.raises(ValueError):
        torch.nn.GRU(3, 4)(torch.ones(5, 2, 3, dtype=torch.float64))
    assert gru.double()(Tensor.ones(5, 2, 3, dtype=dtypes.float64))[0].dtype == dtypes.float64


# (torch's LSTM with projections warns that oneDNN can't run it)
@pytest.mark.filterwarnings("ignore:LSTM with projections")
@pytest.mark.parametrize(
    "name, kwargs, sort, with_state",
    [
        ("GRU", {"bidirectional": True, "batch_first": True}, False, False),
        ("LSTM", {"num_layers": 2, "bidirectional": True, "proj_size": 2}, False, True),
        ("RNN", {"num_layers": 2}, True, True),
    ],
)
def test_packed_input_matches_torch(name: str, kwargs: dict[str, Any], sort: bool, with_state: bool) -> None:
    # each sequence runs to its own last step (the reverse direction from its own end, not from the padding): the
    # packed output, the final states in the batch's order, and the gradients of the sequences, initial states and
    # weights are torch's packed run's
    from uopkit.nn.utils import rnn as urnn

    ours, theirs = _twin(name, 3, 4, **kwargs)
    lengths = [5, 5, 3, 2] if sort else [3, 5, 1, 5]
    seqs = [_randn(n, 3) for n in lengths]
    xs = [Tensor(a, requires_grad=True) for a in seqs]
    ts = [torch.tensor(a, requires_grad=True) for a in seqs]
    if sort:
        packed, packed_t = urnn.pack_sequence(xs), torch.nn.utils.rnn.pack_sequence(ts)
    else:
        padded = urnn.pad_sequence(xs, batch_first=True)
        packed = urnn.pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
        padded_t = torch.nn.utils.rnn.pad_sequence(ts, batch_first=True)
        packed_t = torch.nn.utils.rnn.pack_padded_sequence(padded_t, lengths, batch_first=True, enforce_sorted=False)
    stacked = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    sizes = [kwargs.get("proj_size") or 4] + ([4] if name == "LSTM" else [])
    states = [_randn(stacked, len(lengths), n) for n in sizes]
    hs, hts = [Tensor(a, requires_grad=True) for a in states], [torch.tensor(a, requires_grad=True) for a in states]
    hx = (tuple(hs) if name == "LSTM" else hs[0]) if with_state else None
    hx_t = (tuple(hts) if name == "LSTM" else hts[0]) if with_state else None
    out, h = ours(packed, hx)
    want_out, want_h = theirs(packed_t, hx_t)
    assert isinstance(out, urnn.PackedSequence)
    assert out.batch_sizes.tolist() == want_out.batch_sizes.tolist()
    for got, want in ((out.sorted_indices, want_out.sorted_indices), (out.unsorted_indices, want_out.unsorted_indices)):
        assert (got is None and want is None) or got.tolist() == want.tolist()
    _close(out.data, want_out.data)
    finals, want_finals = (list(h), list(want_h)) if name == "LSTM" else ([h], [want_h])
    for got, want in zip(finals, want_finals, strict=True):
        _close(got, want)
    # weighted, so that each output step and state gets a gradient of its own
    weights = _randn(*out.data.shape)
    loss = (out.data * Tensor(weights)).sum() + sum(((f * (i + 1)).sin().sum() for i, f in enumerate(finals)), 0)
    want_loss = (want_out.data * torch.tensor(weights)).sum() + sum(
        (f * (i + 1)).sin().sum() for i, f in enumerate(want_finals)
    )
    loss.backward()
    want_loss.backward()
    for got, want in zip(xs + (hs if with_state else []), ts + (hts if with_state else []), strict=True):
        _close(got.grad, want.grad)
    params = get_state_dict(ours)
    for k, want in theirs.named_parameters():
        _close(params[k].grad, want.grad)


# ---------------------------------------------------------------------------------------------------------------------
# attention


def _bool_mask(*shape: int) -> np.ndarray:
    # True (not allowed) at random, but never a whole row: every query attends to something
    mask = RNG.random(shape) < 0.4
    mask[..., 0] = False
    return mask


def test_multihead_attention_masks_match_torch() -> None:
    ours, theirs = _twin("MultiheadAttention", 8, 2)
    L, S, N = 3, 4, 2
    q, k, v = _randn(L, N, 8), _randn(S, N, 8), _randn(S, N, 8)
    attn_mask, padding = _bool_mask(L, S), _bool_mask(N, S)
    got = ours(Tensor(q), Tensor(k), Tensor(v), key_padding_mask=Tensor(padding), attn_mask=Tensor(attn_mask))
    want = theirs(
        *map(torch.tensor, (q, k, v)), key_padding_mask=torch.tensor(padding), attn_mask=torch.tensor(attn_mask)
    )
    assert got[1].shape == (N, L, S)
    _close(got[0], want[0])
    _close(got[1], want[1])
    # without the weights: the same output, and None
    out, weights = ours(Tensor(q), Tensor(k), Tensor(v), attn_mask=Tensor(attn_mask), need_weights=False)
    assert weights is None
    _close(out, theirs(*map(torch.tensor, (q, k, v)), attn_mask=torch.tensor(attn_mask), need_weights=False)[0])


def test_multihead_attention_kdim_vdim_batch_first_float_mask() -> None:
    ours, theirs = _twin("MultiheadAttention", 8, 2, kdim=5, vdim=6, batch_first=True)
    assert "q_proj_weight" in get_state_dict(ours) and "in_proj_weight" not in get_state_dict(ours)
    N, L, S = 2, 3, 4
    q, k, v = _randn(N, L, 8), _randn(N, S, 5), _randn(N, S, 6)
    mask = _randn(N * 2, L, S)
    got = ours(Tensor(q), Tensor(k), Tensor(v), attn_mask=Tensor(mask), average_attn_weights=False)
    want = theirs(*map(torch.tensor, (q, k, v)), attn_mask=torch.tensor(mask), average_attn_weights=False)
    assert got[0].shape == (N, L, 8) and got[1].shape == (N, 2, L, S)
    _close(got[0], want[0])
    _close(got[1], want[1])


def test_multihead_attention_bias_kv_zero_attn_unbatched() -> None:
    ours, theirs = _twin("MultiheadAttention", 4, 2, add_bias_kv=True, add_zero_attn=True)
    L, S = 3, 2
    q, kv = _randn(L, 4), _randn(S, 4)
    attn_mask, padding = _bool_mask(2, L, S), np.array([False, True])
    got = ours(Tensor(q), Tensor(kv), Tensor(kv), key_padding_mask=Tensor(padding), attn_mask=Tensor(attn_mask))
    want = theirs(
        torch.tensor(q), torch.tensor(kv), torch.tensor(kv), key_padding_mask=torch.tensor(padding),
        attn_mask=torch.tensor(attn_mask),
    )  # fmt: skip
    # the weights cover the extra key and the zero one too
    assert got[0].shape == (L, 4) and got[1].shape == (L, S + 2)
    _close(got[0], want[0])
    _close(got[1], want[1])


def test_multihead_attention_fully_masked_query_as_torch() -> None:
    # a query that may attend to nothing: NaN with the weights (torch's softmax path), zeros without (torch's sdpa)
    ours, theirs = _twin("MultiheadAttention", 4, 1)
    x, padding = _randn(2, 2, 4), np.array([[True, True], [False, True]])
    for need_weights in (True, False):
        got = ours(Tensor(x), Tensor(x), Tensor(x), key_padding_mask=Tensor(padding), need_weights=need_weights)[0]
        with torch.no_grad():
            want = theirs(*[torch.tensor(x)] * 3, key_padding_mask=torch.tensor(padding), need_weights=need_weights)
        np.testing.assert_allclose(got.numpy(), want[0].numpy(), rtol=1e-5, atol=ATOL)


def test_multihead_attention_errors() -> None:
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    mha, x = nn.MultiheadAttention(4, 2), Tensor.ones(3, 2, 4)
    with pytest.raises(ArgumentError, match="is_causal"):
        mha(x, x, x, is_causal=True)
    with pytest.raises(ShapeError, match="attn_mask"):
        mha(x, x, x, attn_mask=Tensor.zeros(3, 4))
    with pytest.raises(ShapeError, match="key_padding_mask"):
        mha(x, x, x, key_padding_mask=Tensor.zeros(3, 2))
    with pytest.raises(TypeError, match="bool or float"):
        mha(x, x, x, attn_mask=Tensor.zeros(3, 3).cast("int32"))
    with pytest.raises(ShapeError, match="features"):
        mha(Tensor.ones(3, 2, 5), x, x)


# ---------------------------------------------------------------------------------------------------------------------
# transformer


def test_encoder_layer_output_and_gradients_match_torch() -> None:
    ours, theirs = _twin("TransformerEncoderLayer", 8, 2, dim_feedforward=16, dropout=0.0, activation="gelu")
    x = _randn(4, 2, 8)
    mask_np = nn.Transformer.generate_square_subsequent_mask(4).numpy()
    xu, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got = ours(xu, src_mask=Tensor(mask_np), is_causal=True)
    want = theirs(xt, src_mask=torch.tensor(mask_np), is_causal=True)
    _close(got, want)
    (got * got).sum().backward()
    (want * want).sum().backward()
    _close(xu.grad, xt.grad, atol=1e-4)
    params = get_state_dict(ours)
    for k, t in theirs.named_parameters():
        _close(params[k].grad, t.grad, atol=1e-4)


def test_encoder_layer_norm_first_batch_first_padding() -> None:
    kwargs = {"dim_feedforward": 16, "dropout": 0.0, "batch_first": True, "norm_first": True}
    ours, theirs = _twin("TransformerEncoderLayer", 8, 2, activation=Tensor.tanh, **kwargs)
    # (torch's own module with the same activation: a callable)
    theirs.activation = torch.tanh
    x, padding = _randn(2, 3, 8), np.array([[False, False, True], [False, False, False]])
    got = ours(Tensor(x), src_key_padding_mask=Tensor(padding))
    with torch.no_grad():
        want = theirs(torch.tensor(x), src_key_padding_mask=torch.tensor(padding))
    _close(got, want)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first: bool) -> None:
    ours, theirs = _twin("TransformerDecoderLayer", 8, 2, dim_feedforward=16, dropout=0.0, norm_first=norm_first)
    tgt, memory = _randn(3, 2, 8), _randn(4, 2, 8)
    causal = nn.Transformer.generate_square_subsequent_mask(3).numpy()
    padding = np.array([[False, False, False, True], [False, True, False, False]])
    got = ours(Tensor(tgt), Tensor(memory), tgt_mask=Tensor(causal), memory_key_padding_mask=Tensor(padding))
    with torch.no_grad():
        want = theirs(
            torch.tensor(tgt), torch.tensor(memory), tgt_mask=torch.tensor(causal),
            memory_key_padding_mask=torch.tensor(padding),
        )  # fmt: skip
    _close(got, want)


def test_encoder_and_decoder_stacks_match_torch() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    theirs = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    ours = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 2, norm=nn.LayerNorm(8))
    assert list(get_state_dict(ours)) == list(theirs.state_dict())
    # deep copies: independent tensors with the same starting values
    assert ours.layers[0].linear1.weight is not ours.layers[1].linear1.weight
    load_state_dict(ours, {k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = _randn(3, 2, 8)
    with torch.no_grad():
        memory_t = theirs(torch.tensor(x))
    memory = ours(Tensor(x))
    _close(memory, memory_t)

    dec_theirs = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0), 2)
    ours_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0), 2)
    assert list(get_state_dict(ours_dec)) == list(dec_theirs.state_dict())
    load_state_dict(ours_dec, {k: v.detach().numpy() for k, v in dec_theirs.state_dict().items()})
    tgt = _randn(2, 2, 8)
    with torch.no_grad():
        want = dec_theirs(torch.tensor(tgt), memory_t)
    _close(ours_dec(Tensor(tgt), memory), want)


def test_stacks_keep_their_layers_in_a_module_list_as_torch() -> None:
    # torch's `layers` is a ModuleList: a module of its own in named_modules (a training program's walk over them)
    torch.manual_seed(0)
    enc_t = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16), 2, enable_nested_tensor=False)
    dec_t = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 16), 2)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 2)
    for ours, theirs in ((enc, enc_t), (dec, dec_t)):
        assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
        assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
        assert isinstance(ours.layers, nn.ModuleList) and isinstance(ours.get_submodule("layers"), nn.ModuleList)
        assert len(ours.layers) == 2 and ours.layers[1] is list(ours.layers)[1]


def test_transformer_matches_torch() -> None:
    kwargs = {"num_encoder_layers": 1, "num_decoder_layers": 1, "dim_feedforward": 16, "dropout": 0.0}
    ours, theirs = _twin("Transformer", 8, 2, batch_first=True, **kwargs)
    src, tgt = _randn(2, 4, 8), _randn(2, 3, 8)
    causal = nn.Transformer.generate_square_subsequent_mask(3)
    np.testing.assert_array_equal(causal.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(3).numpy())
    padding = np.array([[False, False, False, True], [False, False, False, False]])
    got = ours(
        Tensor(src), Tensor(tgt), tgt_mask=causal, src_key_padding_mask=Tensor(padding),
        memory_key_padding_mask=Tensor(padding),
    )  # fmt: skip
    with torch.no_grad():
        want = theirs(
            torch.tensor(src), torch.tensor(tgt), tgt_mask=torch.tensor(causal.numpy()),
            src_key_padding_mask=torch.tensor(padding), memory_key_padding_mask=torch.tensor(padding),
        )  # fmt: skip
    _close(got, want)
    with pytest.raises(ShapeError, match="batch size"):
        ours(Tensor(src), Tensor(tgt[:1]))


def test_transformer_initialization() -> None:
    model = nn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16)
    state = get_state_dict(model)
    # Xavier-uniform: the copied layers get weights of their own, within sqrt(6 / (fan_in + fan_out))
    first, second = state["encoder.layers.0.linear1.weight"].numpy(), state["encoder.layers.1.linear1.weight"].numpy()
    assert not np.array_equal(first, second) and np.abs(first).max() <= np.sqrt(6 / 24)
    assert np.all(state["encoder.norm.weight"].numpy() == 1) and np.all(
        state["decoder.layers.0.norm3.bias"].numpy() == 0
    )
    # torch's MultiheadAttention: zero projection biases
    assert np.all(nn.MultiheadAttention(4, 2).in_proj_bias.numpy() == 0)


def test_transformer_errors() -> None:
    with pytest.raises(ArgumentError, match="activation"):
        nn.TransformerEncoderLayer(8, 2, activation="swish")
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
    with pytest.raises(ArgumentError, match="is_causal"):
        layer(Tensor.ones(3, 2, 8), is_causal=True)
    with pytest.raises(ShapeError, match="src"):
        layer(Tensor.ones(3, 2, 6))


@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_a_recurrent_step_compiles_once_for_every_step(layer: str) -> None:
    # each step's kernels are the same kernels with another window start: the distinct kernels of a 2-layer LSTM's
    # forward and backward don't grow with the sequence (they did: each step's offset, its state's chain back to the
    # first step, the gradient's slice of a constant, were written into its kernels; and each step's state gradient,
    # not stored, was cut wherever its fused depth ran out, at another place each step: a GRU's 37 kernels at 12
    # steps, 41 at 16)
    from uopkit.schedule import create_schedule, kernelize_tensors

    def distinct_kernels(steps: int) -> int:
        rnn = getattr(nn, layer)(6, 8, num_layers=2, batch_first=True)
        x = Tensor(np.random.default_rng(0).standard_normal((3, steps, 6)).astype(np.float32)).realize()
        out, h = rnn(x)
        (out.sum() + (h[0] if isinstance(h, tuple) else h).sum()).backward()
        items = create_schedule(kernelize_tensors([p.grad for p in rnn.parameters()]))
        return len({item.ast for item in items})

    assert distinct_kernels(4) <= distinct_kernels(12) == distinct_kernels(16)


@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_a_loss_of_the_output_keeps_the_backward_steps_one_kernel(layer: str) -> None:
    # a loss computed from the output elementwise gave each step's backward kernel its slice of the loss's gradient
    # formula, read at an offset written into the kernel: a kernel per step, compiled again for every new length (a
    # GRU's 69 distinct kernels at 12 steps, 85 at 16); with the output's gradient stored, the steps read windows of it
    from uopkit.schedule import create_schedule, kernelize_tensors

    def distinct_kernels(steps: int) -> int:
        rnn = getattr(nn, layer)(6, 8, num_layers=2, bidirectional=True)
        x = Tensor(np.random.default_rng(0).standard_normal((steps, 3, 6)).astype(np.float32)).realize()
        target = Tensor(np.random.default_rng(1).standard_normal((steps, 3, 16)).astype(np.float32)).realize()
        out, _ = rnn(x)
        (out - target).square().mean().backward()
        items = create_schedule(kernelize_tensors([p.grad for p in rnn.parameters()]))
        return len({item.ast for item in items})

    assert distinct_kernels(4) <= distinct_kernels(12) == distinct_kernels(16)


def test_packed_steps_compile_once_for_every_step() -> None:
    # the masked steps of a packed run read their masks as windows of one stored buffer: one kernel for every step
    from uopkit.nn.utils import rnn as urnn
    from uopkit.schedule import create_schedule, kernelize_tensors

    def distinct_kernels(steps: int) -> int:
        gru = nn.GRU(6, 8, bidirectional=True)
        rng = np.random.default_rng(0)
        seqs = [Tensor(rng.standard_normal((n, 6)).astype(np.float32)) for n in (steps, steps - 1, steps // 2, 2)]
        out, h = gru(urnn.pack_sequence(seqs, enforce_sorted=False))
        (out.data.square().sum() + h.sum()).backward()
        items = create_schedule(kernelize_tensors([p.grad for p in gru.parameters()]))
        return len({item.ast for item in items})

    assert distinct_kernels(12) == distinct_kernels(16)
