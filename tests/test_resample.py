"""interpolate's weight tables (uopkit.tensor.resample): antialias=True and uint8 bicubic against PyTorch's kernels,
values and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import uopkit.nn.functional as UF
from uopkit import Tensor, dtypes
from uopkit.tensor.resample import antialias_table, fixed_point

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(5)

# (input H, W) and interpolate's keywords: down and up, odd and non-square sizes, a scale_factor, one axis kept (its
# size unchanged by a scale_factor that isn't 1: PyTorch copies it), align_corners, recompute_scale_factor
CASES = [
    ((33, 21), dict(size=(10, 8))),
    ((9, 13), dict(size=(4, 5))),
    ((9, 13), dict(size=(17, 7))),
    ((5, 5), dict(size=(16, 24))),
    ((64, 48), dict(size=(7, 30))),
    ((32, 17), dict(scale_factor=0.37)),
    ((9, 13), dict(scale_factor=(1.05, 0.5))),
    ((9, 13), dict(scale_factor=1.1)),
    ((20, 31), dict(scale_factor=(0.4, 2.3))),
    ((12, 7), dict(size=(3, 11), align_corners=True)),
    ((9, 13), dict(size=(1, 1), align_corners=True)),
    ((16, 16), dict(scale_factor=0.6, recompute_scale_factor=True)),
]


def test_antialias_table_stretches_the_filter_over_a_downsampling():
    # 4 -> 2 (scale 2): the triangle twice as wide, centred on input coordinate 1 and 3, each row normalized
    table = antialias_table(4, 2, 2.0, "bilinear")
    np.testing.assert_allclose(table, np.array([[3, 3, 1, 0], [0, 1, 3, 3]]) / 7)
    # upsampling isn't stretched: 2 -> 4 is plain linear interpolation, the border taps dropped and renormalized
    np.testing.assert_allclose(antialias_table(2, 4, 0.5, "bilinear"), [[1, 0], [0.75, 0.25], [0.25, 0.75], [0, 1]])
    # Keys' a = -0.5 has negative lobes; the rows still sum to 1
    np.testing.assert_allclose(antialias_table(13, 4, 13 / 4, "bicubic").sum(1), 1)
    # fixed point: the most fraction bits that keep 1.125 below 2**15, halves rounded away from zero
    fixed, bits = fixed_point(np.array([[0.75, 0.25], [-0.125, 1.125], [-3 / 2**15, 3 / 2**15]]))
    assert bits == 14 and fixed.tolist() == [[12288, 4096], [-2048, 18432], [-2, 2]]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_antialias_as_torch_values_and_gradients(mode, dtype):
    # (float32: PyTorch computes its weights in float32, ours rounded from float64: a few 1e-6 apart)
    atol = 1e-12 if dtype == np.float64 else 5e-5
    for (h, w), kw in CASES:
        x = RNG.standard_normal((2, 3, h, w)).astype(dtype)
        ours = Tensor(x, requires_grad=True)
        theirs = torch.tensor(x, requires_grad=True)
        out = UF.interpolate(ours, mode=mode, antialias=True, **kw)
        ref = TF.interpolate(theirs, mode=mode, antialias=True, **kw)
        assert out.shape == tuple(ref.shape) and out.numpy().dtype == dtype
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=0, err_msg=f"{(h, w)} {kw}")
        upstream = RNG.standard_normal(out.shape).astype(dtype)
        (out * Tensor(upstream)).sum().backward()
        (ref * torch.tensor(upstream)).sum().backward()
        expected = theirs.grad.numpy()
        if _keeps_an_axis(x.shape[2:], kw):
            # PyTorch's backward resamples the kept axis its forward copies (its gradcheck fails there): the
            # reference is the adjoint of its forward, read off the outputs of a basis of one-pixel images
            basis = torch.eye(h * w, dtype=theirs.dtype).reshape(h * w, 1, h, w)
            matrix = TF.interpolate(basis, mode=mode, antialias=True, **kw).reshape(h * w, -1).numpy()
            expected = (upstream.reshape(6, -1) @ matrix.T).reshape(x.shape)
        np.testing.assert_allclose(ours.grad.numpy(), expected, atol=atol, rtol=0, err_msg=f"{kw}")


def _keeps_an_axis(spatial: tuple[int, ...], kw: dict) -> bool:
    # a scale_factor other than 1 that leaves an axis its size
    factor = kw.get("scale_factor")
    if factor is None or kw.get("recompute_scale_factor"):
        return False
    factors = factor if isinstance(factor, tuple) else (factor,) * len(spatial)
    return any(int(L * f) == L and f != 1 for L, f in zip(spatial, factors, strict=True))


@pytest.mark.parametrize("mode, antialias", [("bilinear", True), ("bicubic", True), ("bicubic", False)])
def test_uint8_as_torchs_fixed_point_kernels(mode, antialias):
    # PyTorch's uint8 kernels: int16-range fixed-point weights, width first, each pass rounded and clamped to 0..255
    # (its AVX2 kernel for up to 4 channels and its generic one for more give the same bits); the same bits here.
    # (A width of 1 kept 1 is left out: PyTorch's generic kernel returns garbage there, its AVX2 one what we do.)
    for (h, w), kw in CASES + [((400, 9), dict(size=(2, 3)))]:
        for channels in (3, 5):
            x = RNG.integers(0, 256, (2, channels, h, w)).astype(np.uint8)
            try:
                theirs = TF.interpolate(torch.tensor(x), mode=mode, antialias=antialias, **kw)
            except RuntimeError:
                # (PyTorch's AVX2 kernel fails an internal assert resizing 3 channels to 1x1)
                continue
            ours = UF.interpolate(Tensor(x), mode=mode, antialias=antialias, **kw)
            assert ours.dtype == dtypes.uint8
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=f"{(h, w)} {kw} {channels}")


def test_antialias_of_half_floats_is_float32_rounded_once():
    # (PyTorch's CPU kernel refuses half floats: its float32 result rounded is the reference)
    x = RNG.standard_normal((1, 2, 33, 21)).astype(np.float16)
    for mode in ("bilinear", "bicubic"):
        ours = Tensor(x).interpolate(size=(10, 8), mode=mode, antialias=True)
        ref = TF.interpolate(torch.tensor(x).float(), size=(10, 8), mode=mode, antialias=True).half()
        assert ours.dtype == dtypes.float16
        np.testing.assert_allclose(ours.numpy().astype(np.float32), ref.float().numpy(), atol=2e-3, rtol=0)


def test_antialias_refuses_what_torch_refuses():
    for call in (
        lambda F, t: F.interpolate(t, size=4, mode="nearest", antialias=True),
        lambda F, t: F.interpolate(t[:, :, 0], size=4, mode="linear", antialias=True),
        lambda F, t: F.interpolate(t[:, :, None], size=4, mode="trilinear", antialias=True),
    ):
        with pytest.raises(ValueError, match="restricted to bilinear, bicubic"):
            call(TF, torch.ones(1, 1, 5, 5))
        with pytest.raises(ValueError, match="antialias=True is restricted to the bilinear and bicubic modes"):
            call(UF, Tensor.ones(1, 1, 5, 5))
    # integer inputs other than uint8 (PyTorch: NotImplementedError, a RuntimeError; ours a TypeError)
    with pytest.raises(TypeError, match="antialias=True needs a float or uint8 input"):
        Tensor(np.ones((1, 1, 5, 5), np.int32)).interpolate(size=3, mode="bilinear", antialias=True)
    with pytest.raises(TypeError, match="mode 'bicubic' needs a float or uint8 input"):
        Tensor(np.ones((1, 1, 5, 5), np.int16)).interpolate(size=3, mode="bicubic")
