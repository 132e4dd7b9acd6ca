"""uopkit.amp against torch.amp: autocast's dtypes and values on "cpu" (torch's CPU lists), the GPU lists on a second
device type (the emulator's), nesting, decorators and threads; GradScaler's steps, skips and scales in a training
loop with overflowing gradients, its state dict and its errors."""

import doctest
import threading

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, amp, dtypes, nn
from uopkit.nn import functional as F
from uopkit.nn.optim import SGD

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X = RNG.standard_normal((8, 6)).astype(np.float32)
Y = RNG.integers(0, 3, 8)


def test_docstring_examples():
    assert doctest.testmod(amp).failed == 0


def _mlp():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    ours = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def _close(ours, theirs, rtol, atol=1e-6):
    np.testing.assert_allclose(ours.float().numpy(), theirs.detach().float().numpy(), rtol=rtol, atol=atol)


def test_cpu_autocast_matches_torch_dtypes_values_and_gradients():
    ours, theirs = _mlp()
    with amp.autocast("cpu"):
        logits = ours(Tensor(X))
        loss = F.cross_entropy(logits, Tensor(Y))
    with torch.autocast("cpu"):
        t_logits = theirs(torch.tensor(X))
        t_loss = torch.nn.functional.cross_entropy(t_logits, torch.tensor(Y))
    assert logits.dtype == dtypes.bfloat16 and t_logits.dtype == torch.bfloat16
    assert loss.dtype == dtypes.float32 and t_loss.dtype == torch.float32
    # (both multiply bfloat16 inputs in float32 and round once; a bias added before or after that rounding: 1 ulp)
    _close(logits, t_logits, rtol=2e-2, atol=2e-2)
    _close(loss, t_loss, rtol=1e-2)
    loss.backward()
    t_loss.backward()
    for (name, p), tp in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert p.grad.dtype == dtypes.float32, name
        _close(p.grad, tp.grad, rtol=3e-2, atol=3e-3)


def test_cpu_lists_convolution_softmax_and_float32_ops():
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    a = (RNG.standard_normal((3, 3)) + 3 * np.eye(3)).astype(np.float32)
    with amp.autocast("cpu"):
        conv = Tensor(x).conv2d(Tensor(w), Tensor.ones(4), padding=1)
        soft = Tensor(X).cast(dtypes.bfloat16).softmax(-1)
        inv = Tensor(a).cast(dtypes.bfloat16).inverse()
        prod = Tensor(X[:2, :3]).cast(dtypes.bfloat16).prod()
        mm64 = Tensor(a.astype(np.float64)) @ Tensor(a.astype(np.float64))
    with torch.autocast("cpu"):
        t_conv = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.ones(4), padding=1)
        t_soft = torch.tensor(X).bfloat16().softmax(-1)
        t_inv = torch.tensor(a).bfloat16().inverse()
        t_prod = torch.tensor(X[:2, :3]).bfloat16().prod()
    assert (conv.dtype, soft.dtype, inv.dtype, prod.dtype, mm64.dtype) == (
        dtypes.bfloat16,
        dtypes.bfloat16,
        dtypes.float32,
        dtypes.float32,
        dtypes.float64,
    )
    assert (t_conv.dtype, t_soft.dtype, t_inv.dtype, t_prod.dtype) == (
        torch.bfloat16,
        torch.bfloat16,
        torch.float32,
        torch.float32,
    )
    _close(conv, t_conv, rtol=3e-2, atol=5e-2)
    _close(soft, t_soft, rtol=1e-2, atol=1e-2)
    _close(inv, t_inv, rtol=1e-4, atol=1e-5)
    _close(prod, t_prod, rtol=1e-5)


def test_gpu_lists_apply_on_other_device_types():
    # torch's CUDA lists: float16 products, float32 softmax and layer norm (on the emulator, a second device type)
    x = Tensor(X, device="EMULATOR")
    w = Tensor(RNG.standard_normal((6, 4)).astype(np.float32), device="EMULATOR")
    with amp.autocast("emulator"):
        assert amp.get_autocast_dtype("emulator") == dtypes.float16
        h = x @ w
        soft = h.softmax(-1)
        normed = F.layer_norm(h, (4,))
        cpu_h = Tensor(X) @ Tensor(X.T)
    assert (h.dtype, soft.dtype, normed.dtype, cpu_h.dtype) == (
        dtypes.float16,
        dtypes.float32,
        dtypes.float32,
        dtypes.float32,
    )
    expected = (X.astype(np.float16).astype(np.float32) @ w.numpy().astype(np.float16).astype(np.float32)).astype(
        np.float16
    )
    np.testing.assert_allclose(h.numpy(), expected, rtol=2e-3, atol=2e-3)


def test_nesting_decorator_and_threads():
    w = Tensor(X.T)
    assert not uopkit.is_autocast_enabled("cpu")
    with amp.autocast("cpu"):
        assert uopkit.is_autocast_enabled("cpu")
        with amp.autocast("cpu", enabled=False):
            assert (Tensor(X) @ w).dtype == dtypes.float32
        with amp.autocast("cpu", dtype=dtypes.float16):
            assert (Tensor(X) @ w).dtype == dtypes.float16
        assert (Tensor(X) @ w).dtype == dtypes.bfloat16
        seen = []
        other = threading.Thread(target=lambda: seen.append((Tensor(X) @ w).dtype))
        other.start()
        other.join()
        assert seen == [dtypes.float32]
    assert (Tensor(X) @ w).dtype == dtypes.float32

    @amp.autocast("cpu")
    def forward(x):
        return x @ w

    assert forward(Tensor(X)).dtype == dtypes.bfloat16
    assert (Tensor(X) @ w).dtype == dtypes.float32


def test_recorded_graphs_do_not_carry_autocast_in_or_out():
    # softmin replays a graph recorded per signature, and calls softmax (float32 on GPU types): one recorded inside a
    # block must not be replayed outside, nor one recorded outside inside
    x = Tensor(X, device="EMULATOR").cast(dtypes.float16)
    y = Tensor(X[::-1].copy(), device="EMULATOR").cast(dtypes.float16)
    with amp.autocast("emulator"):
        inside = x.softmin(-1)
    outside = y.softmin(-1)
    with amp.autocast("emulator"):
        inside_again = y.softmin(-1)
    assert (inside.dtype, outside.dtype, inside_again.dtype) == (dtypes.float32, dtypes.float16, dtypes.float32)


def test_backward_inside_a_block_keeps_the_forward_dtypes():
    ours, _ = _mlp()
    with amp.autocast("cpu"):
        loss = ours(Tensor(X)).float().square().mean()
        loss.backward()
    assert all(p.grad.dtype == dtypes.float32 for p in ours.parameters())


def test_autocast_errors():
    with pytest.raises(ValueError, match="unknown device_type 'tpu'"):
        amp.autocast("tpu")
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        amp.autocast("cpu", dtype=dtypes.float32)
    with pytest.raises(TypeError, match="device_type must be a str"):
        amp.autocast(None)


def _train(scaler_cls, model, opt, make_tensor, backward_scale, overflow_steps, steps=6):
    scales, losses = [], []
    scaler = scaler_cls("cpu", init_scale=2.0**10, growth_interval=2)
    for step in range(steps):
        opt.zero_grad()
        loss = model(make_tensor(X)).square().mean()
        if step in overflow_steps:
            # an overflowing loss: its gradients are inf, the step is skipped and the scale halved
            loss = loss * backward_scale
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        losses.append(float(loss.item()))
    return scales, losses, scaler.state_dict()


def test_grad_scaler_matches_torch_in_a_training_loop():
    ours, theirs = _mlp()
    got = _train(amp.GradScaler, ours, SGD(ours.parameters(), lr=0.1), Tensor, 1e38, {1, 4})
    want = _train(
        torch.amp.GradScaler, theirs, torch.optim.SGD(theirs.parameters(), lr=0.1), torch.tensor, 1e38, {1, 4}
    )
    assert got[0] == want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
    assert got[2] == want[2]
    for p, tp in zip(ours.parameters(), theirs.parameters(), strict=True):
        _close(p, tp, rtol=1e-5)


def test_grad_scaler_order_errors_and_disabled():
    ours, _ = _mlp()
    opt = SGD(ours.parameters(), lr=0.1)
    scaler = amp.GradScaler("cpu")
    with pytest.raises(RuntimeError, match="GradScaler.update: no optimizer went through step"):
        scaler.update()
    scaler.scale(ours(Tensor(X)).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscaled already"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="stepped already"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    scaler.update()
    with pytest.raises(RuntimeError, match="closure"):
        scaler.step(opt, closure=lambda: None)
    with pytest.raises(ValueError, match="growth_factor"):
        amp.GradScaler(growth_factor=1.0)
    off = amp.GradScaler(enabled=False)
    loss = ours(Tensor(X)).sum()
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}


def test_grad_scaler_state_dict_round_trip_with_torch():
    theirs = torch.amp.GradScaler("cpu", init_scale=512.0, growth_interval=7)
    ours = amp.GradScaler("cpu")
    ours.load_state_dict(theirs.state_dict())
    assert ours.state_dict() == theirs.state_dict()
    assert ours.get_scale() == 512.0 and ours.get_growth_interval() == 7


def test_custom_fwd_and_custom_bwd():
    seen = {}

    class Square(uopkit.autograd.Function):
        @staticmethod
        @amp.custom_fwd(device_type="cpu", cast_inputs=dtypes.float32)
        def forward(ctx, a, w):
            ctx.save_for_backward(a, w)
            seen["forward"] = (a.dtype, uopkit.is_autocast_enabled("cpu"))
            return a @ w

        @staticmethod
        @amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            a, w = ctx.saved_tensors
            seen["backward"] = uopkit.is_autocast_enabled("cpu")
            return g @ w.T, a.T @ g

    a = Tensor(X).cast(dtypes.bfloat16)
    w = Tensor(X.T.copy(), requires_grad=True)
    with amp.autocast("cpu"):
        out = Square.apply(a, w)
    assert out.dtype == dtypes.float32
    assert seen["forward"] == (dtypes.float32, False)
    out.sum().backward()
    # the backward runs under the autocast state its forward's caller had
    assert seen["backward"] is True and w.grad.dtype == dtypes.float32
    # (its product in bfloat16, as torch's would be: rounded to bfloat16's 8 bits)
    np.testing.assert_allclose(w.grad.numpy(), a.float().numpy().T @ np.ones((8, 8), np.float32), rtol=8e-3)


def test_cpu_list_dtypes_of_more_ops_as_torch():
    # each op's result dtype inside autocast("cpu") against torch's (its CPU lists: einsum lowers to bmm, prelu and
    # vecdot are lower precision, mv is on no list, trace and grid_sample compute in float32, and the losses torch
    # doesn't list keep their inputs' dtype)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
    m, v = rng.standard_normal((3, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    img = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    grid = rng.uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32)
    tf, t = torch.nn.functional, torch.tensor
    w = np.array([0.25], np.float32)
    cases = [
        (
            "einsum",
            lambda: torch.einsum("bij,bjk->bik", t(a), t(b)),
            lambda: Tensor.einsum("bij,bjk->bik", Tensor(a), Tensor(b)),
        ),
        ("prelu", lambda: tf.prelu(t(m), t(w)), lambda: F.prelu(Tensor(m), Tensor(w))),
        ("vecdot", lambda: torch.linalg.vecdot(t(m), t(m)), lambda: Tensor(m).vecdot(Tensor(m))),
        ("mv", lambda: t(m).mv(t(v)), lambda: Tensor(m).mv(Tensor(v))),
        ("trace", lambda: t(m).bfloat16().trace(), lambda: Tensor(m).bfloat16().trace()),
        (
            "grid_sample",
            lambda: tf.grid_sample(t(img).bfloat16(), t(grid).bfloat16(), align_corners=False),
            lambda: F.grid_sample(Tensor(img).bfloat16(), Tensor(grid).bfloat16(), align_corners=False),
        ),
        (
            "gaussian_nll_loss",
            lambda: tf.gaussian_nll_loss(t(v).bfloat16(), t(v).bfloat16(), t(v).abs().bfloat16()),
            lambda: F.gaussian_nll_loss(Tensor(v).bfloat16(), Tensor(v).bfloat16(), Tensor(v).abs().bfloat16()),
        ),
    ]
    names = {dtypes.bfloat16: "torch.bfloat16", dtypes.float32: "torch.float32"}
    for name, theirs, ours in cases:
        with torch.autocast("cpu"):
            want = str(theirs().dtype)
        with amp.autocast("cpu"):
            got = names[ours().dtype]
        assert got == want, name


def test_attention_weights_with_a_bool_mask_keep_the_scores_dtype():
    x = Tensor(RNG.standard_normal((5, 2, 8)).astype(np.float32))
    mha = nn.MultiheadAttention(8, 2)
    mask = Tensor(np.triu(np.ones((5, 5), bool), 1))
    with amp.autocast("cpu"):
        out, weights = mha(x, x, x, attn_mask=mask)
    assert out.dtype == weights.dtype == dtypes.bfloat16


def test_loss_layers_compute_in_float32_as_their_functional_forms():
    # torch casts inside the loss op, so a loss layer under autocast("cpu") gives what its nn.functional form gives:
    # float32 for the listed losses, the input's dtype for the others (GaussianNLLLoss, MultiLabelSoftMarginLoss)
    rng = np.random.default_rng(5)
    x, p = rng.standard_normal((4, 3)).astype(np.float32), rng.uniform(0.1, 0.9, (4, 3)).astype(np.float32)
    y, sign = rng.integers(0, 3, 4), np.sign(rng.standard_normal((4, 3))).astype(np.float32)
    t = torch.tensor
    cases = [
        ("CrossEntropyLoss", {"label_smoothing": 0.1}, lambda T: (T(x).bfloat16(), T(y))),
        ("NLLLoss", {}, lambda T: (T(x).bfloat16(), T(y))),
        ("MSELoss", {}, lambda T: (T(x).bfloat16(), T(p).bfloat16())),
        ("L1Loss", {}, lambda T: (T(x).bfloat16(), T(p).bfloat16())),
        ("HuberLoss", {}, lambda T: (T(x).bfloat16(), T(p).bfloat16())),
        ("SmoothL1Loss", {}, lambda T: (T(x).bfloat16(), T(p).bfloat16())),
        ("BCELoss", {}, lambda T: (T(p).bfloat16(), T(p[::-1].copy()).bfloat16())),
        ("BCEWithLogitsLoss", {}, lambda T: (T(x).bfloat16(), T(p).bfloat16())),
        ("KLDivLoss", {"reduction": "batchmean"}, lambda T: (T(x).bfloat16(), T(p).bfloat16())),
        ("SoftMarginLoss", {}, lambda T: (T(x).bfloat16(), T(sign).bfloat16())),
        ("HingeEmbeddingLoss", {}, lambda T: (T(x).bfloat16(), T(sign).bfloat16())),
        ("PoissonNLLLoss", {}, lambda T: (T(x).bfloat16(), T(p).bfloat16())),
        ("MultiMarginLoss", {}, lambda T: (T(x).bfloat16(), T(y))),
        ("MarginRankingLoss", {}, lambda T: (T(x[0]).bfloat16(), T(x[1]).bfloat16(), T(sign[0]).bfloat16())),
        ("CosineEmbeddingLoss", {}, lambda T: (T(x).bfloat16(), T(p).bfloat16(), T(sign[:, 0]).bfloat16())),
        ("TripletMarginLoss", {}, lambda T: (T(x).bfloat16(), T(p).bfloat16(), T(sign).bfloat16())),
        ("MultiLabelSoftMarginLoss", {}, lambda T: (T(x).bfloat16(), T((p > 0.5).astype(np.float32)).bfloat16())),
        ("GaussianNLLLoss", {}, lambda T: (T(x).bfloat16(), T(p).bfloat16(), T(p).bfloat16())),
    ]
    names = {dtypes.bfloat16: "torch.bfloat16", dtypes.float32: "torch.float32"}
    for name, kwargs, args in cases:
        with torch.autocast("cpu"):
            want = getattr(torch.nn, name)(**kwargs)(*args(t))
        with amp.autocast("cpu"):
            got = getattr(nn, name)(**kwargs)(*args(Tensor))
        assert names[got.dtype] == str(want.dtype), name
        np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2e-6, atol=1e-6, err_msg=name)
