"""Merging a kernel's adjacent axes (codegen/merge.py): which axes merge, the values stay, explicit opts keep the
kernel's own axes."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.codegen import get_program, prepare_ast
from uopkit.codegen.merge import merge_axes
from uopkit.codegen.opt import Opt, OptOps
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.uop.ops import Ops

_R = np.random.default_rng(7)


def _ast(t: Tensor):
    return prepare_ast(create_schedule(kernelize_tensors([t]))[-1].ast)


def _shape(ast) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the stored shape, the reduce's axes) of a kernel AST."""
    red = [u.arg[1] for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
    return ast.src[0].src[0].shape, red[0] if red else ()


def _data(*shape: int) -> Tensor:
    return Tensor(_R.standard_normal(shape).astype(np.float32))


def test_a_contiguous_image_with_a_channel_bias_runs_as_rows_of_pixels():
    x, b = _data(4, 16, 4, 4), _data(16)
    out = (x + b.reshape(1, 16, 1, 1)).relu()
    merged = merge_axes(_ast(out))
    assert _shape(merged) == ((4, 16, 16), ())
    src = get_program(_ast(out), Device["CPU"].renderer).src
    assert "E_4_16_16" in src and "%" not in src and "/" not in src.split("{", 1)[1]
    ref = np.maximum(x.numpy() + b.numpy().reshape(1, 16, 1, 1), 0)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)


def test_reduce_axes_merge_with_reduce_axes_only():
    x = _data(4, 6, 5, 3)
    assert _shape(merge_axes(_ast(x.sum(axis=(2, 3))))) == ((24, 1), (1,))
    # the reduce axes 1 and 2 sit between kept axes: nothing merges across them
    assert _shape(merge_axes(_ast(x.sum(axis=(1, 2))))) == ((4, 1, 3), (1,))
    np.testing.assert_allclose(x.sum(axis=(1, 2)).numpy(), x.numpy().sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.max(axis=(2, 3)).numpy(), x.numpy().max(axis=(2, 3)), rtol=1e-6)


@pytest.mark.parametrize(
    "name,view,ref,shape",
    [
        # the permuted axes merge where they stay neighbours, in order
        ("permute", lambda x: x.permute(0, 2, 3, 1), lambda x: x.transpose(0, 2, 3, 1), (4, 10, 6)),
        # a broadcast along both merged axes or neither
        ("broadcast", lambda x: x[:, :1].expand(4, 6, 5, 2) + x, lambda x: x[:, :1] + x, (4, 6, 10)),
        # padding the inner axis breaks its rows; the outer one is padded by whole rows
        (
            "pad inner",
            lambda x: x.pad(((0, 0), (0, 0), (0, 0), (1, 0))),
            lambda x: np.pad(x, ((0, 0),) * 3 + ((1, 0),)),
            (120, 3),
        ),
        (
            "pad outer",
            lambda x: x.pad(((0, 0), (0, 0), (1, 2), (0, 0))),
            lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2), (0, 0))),
            (24, 16),
        ),
        ("shrink inner", lambda x: x[:, :, :, :1] * 2, lambda x: x[:, :, :, :1] * 2, (120, 1)),
        ("shrink outer", lambda x: x[:, :, 1:4, :] * 2, lambda x: x[:, :, 1:4, :] * 2, (24, 6)),
        ("flip both", lambda x: x.flip((2, 3)) * 2, lambda x: x[:, :, ::-1, ::-1] * 2, (24, 10)),
        ("flip one", lambda x: x.flip(3) * 2, lambda x: x[:, :, :, ::-1] * 2, (120, 2)),
    ],
)
def test_views_decide_which_axes_merge_and_values_stay(name, view, ref, shape):
    x = _data(4, 6, 5, 2)
    out = view(x).contiguous()
    assert _shape(merge_axes(_ast(out)))[0] == shape, name
    np.testing.assert_allclose(out.numpy(), ref(x.numpy()), rtol=1e-6)


@pytest.mark.parametrize("shape", [(2, 1, 3), (3, 1), (1, 4, 1, 2), (2, 1, 1, 3)])
def test_a_flip_of_a_size_one_axis_flips_nothing_it_merges_with(shape):
    # a size-1 axis merges with its neighbours whether or not it is flipped; its flip must not flip them
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    other = next(a for a, n in enumerate(shape) if n > 1)
    for axis in [a for a, n in enumerate(shape) if n == 1]:
        np.testing.assert_array_equal(Tensor(x).flip(axis).numpy(), np.flip(x, axis))
        both = tuple(sorted((other, axis)))
        np.testing.assert_array_equal((Tensor(x).flip(both) + 1).numpy(), np.flip(x, both) + 1)


def test_a_reshape_of_a_permuted_view_merges_only_where_the_layouts_agree():
    # (2, 3, 8, 12) pooled 2x3 and its gradient scattered back: the reshapes split the image axes into windows, and
    # merging windows with other axes would need a division per element
    x = Tensor.empty(2, 3, 8, 12, requires_grad=True)
    pooled = x.max_pool2d((2, 3), stride=(2, 3))
    (pooled * Tensor.empty(*pooled.shape)).sum().backward()
    for item in create_schedule(kernelize_tensors([x.grad])):
        src = get_program(item.ast, Device["CPU"].renderer).src
        assert "%" not in src, src


def test_merging_is_idempotent_and_keeps_kernels_it_cannot_merge():
    x = _data(4, 6, 5, 2)
    for t in (x * 2, x.sum(axis=(2, 3)), x.permute(0, 3, 1, 2).contiguous(), x.sum(axis=1)):
        once = merge_axes(_ast(t))
        assert merge_axes(once) is once
    # a transpose of two axes: every axis moves, nothing merges (the same node back)
    ast = _ast(_data(6, 5).T.contiguous())
    assert merge_axes(ast) is ast


def test_explicit_opts_are_for_the_kernels_own_axes():
    x, b = _data(4, 16, 4, 4), _data(16)
    out = (x + b.reshape(1, 16, 1, 1)).relu()
    item = create_schedule(kernelize_tensors([out]))[-1]
    # axis 3 (the image's 4 columns) exists only before merging: given opts address the AST as it is
    spec = get_program(item.ast, Device["CPU"].renderer, [Opt(OptOps.UPCAST, 3, 4)])
    assert spec.name == "E_4_16_4_4"
    ref = np.maximum(x.numpy() + b.numpy().reshape(1, 16, 1, 1), 0)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)


def test_softmax_and_layernorm_rows_over_merged_axes():
    x = _data(3, 4, 5, 6)
    got = x.reshape(3, 4, 30).softmax(-1).numpy()
    e = np.exp(x.numpy().reshape(3, 4, 30) - x.numpy().reshape(3, 4, 30).max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    y = (x - x.mean(axis=(2, 3), keepdim=True)) / (x.std(axis=(2, 3), keepdim=True) + 1e-5)
    xn = x.numpy().astype(np.float64)
    ref = (xn - xn.mean(axis=(2, 3), keepdims=True)) / (xn.std(axis=(2, 3), ddof=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-5)
