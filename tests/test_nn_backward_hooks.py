"""A module's backward hooks (full, pre, the deprecated kind) and Tensor.register_post_accumulate_grad_hook against
torch's: what the hooks see, the gradients they give flowing on, the order for nested modules, removal, a second
backward, inputs without gradients, and torch's errors and warnings."""

import warnings

import numpy as np
import pytest

from uopkit import Tensor, nn
from uopkit.tensor.autograd import grad

torch = pytest.importorskip("torch")


def _lists(grads):
    return [None if g is None else np.asarray(g.tolist()) for g in grads]


def _same(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert (a is None) == (b is None), (ours, theirs)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _linear_pair(n_in=3, n_out=2):
    ours, theirs = nn.Linear(n_in, n_out), torch.nn.Linear(n_in, n_out)
    ours.weight.assign(Tensor(theirs.weight.detach().numpy()))
    ours.bias.assign(Tensor(theirs.bias.detach().numpy()))
    return ours, theirs


def _recorder(log):
    def full(m, grad_input, grad_output):
        log.append(("full", _lists(grad_input), _lists(grad_output)))

    def pre(m, grad_output):
        log.append(("pre", _lists(grad_output)))

    return full, pre


def _same_log(ours, theirs):
    assert [e[0] for e in ours] == [e[0] for e in theirs]
    for a, b in zip(ours, theirs, strict=True):
        for x, y in zip(a[1:], b[1:], strict=True):
            _same(x, y)


X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=np.float32)


def test_full_and_pre_hooks_see_torchs_gradients():
    ours, theirs = _linear_pair()
    log_o, log_t = [], []
    for m, log in ((ours, log_o), (theirs, log_t)):
        full, pre = _recorder(log)
        m.register_full_backward_hook(full)
        m.register_full_backward_pre_hook(pre)
    x = Tensor(X, requires_grad=True)
    xt = torch.tensor(X, requires_grad=True)
    (ours(x).tanh() * Tensor([1.0, -2.0])).sum().backward()
    (theirs(xt).tanh() * torch.tensor([1.0, -2.0])).sum().backward()
    _same_log(log_o, log_t)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_returned_gradients_flow_on():
    def scale_input(m, grad_input, grad_output):
        return (grad_input[0] * 10,)

    def scale_output(m, grad_output):
        return (grad_output[0] * 3,)

    ours, theirs = _linear_pair()
    ours.register_full_backward_hook(scale_input)
    theirs.register_full_backward_hook(scale_input)
    ours.register_full_backward_pre_hook(scale_output)
    theirs.register_full_backward_pre_hook(scale_output)
    x, xt = Tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    (ours(x) ** 2).sum().backward()
    (theirs(xt) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5)
    # the pre-hook's gradient reaches the weights; the hook's only the input
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-5)


def test_several_inputs_and_outputs():
    # non-tensor arguments and outputs are None, an output without a gradient is None, an input that needs none is 0
    def forward(a, b, k):
        return a * b * k, 7, b * 2

    class Ours(nn.Module):
        def forward(self, a, b, k):
            return forward(a, b, k)

    class Theirs(torch.nn.Module):
        def forward(self, a, b, k):
            return forward(a, b, k)

    log_o, log_t = [], []
    ours, theirs = Ours(), Theirs()
    for m, log in ((ours, log_o), (theirs, log_t)):
        full, pre = _recorder(log)
        m.register_full_backward_hook(full)
        m.register_full_backward_pre_hook(pre)
    a, at = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    b, bt = Tensor([3.0, -1.0]), torch.tensor([3.0, -1.0])
    y, n, z = ours(a, b, 2.0)
    yt, nt, zt = theirs(at, bt, 2.0)
    assert n == nt == 7 and not z.requires_grad
    y.sum().backward()
    yt.sum().backward()
    _same_log(log_o, log_t)


def test_nested_modules_call_order():
    def make(lib):
        class Inner(lib.Module):
            def __init__(self):
                super().__init__()
                self.fc = lib.Linear(2, 2)

            def forward(self, x):
                return self.fc(x).tanh()

        class Outer(lib.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = Inner(), Inner()

            def forward(self, x):
                return self.b(self.a(x))

        return Outer()

    orders = []
    for lib, x in ((nn, Tensor.ones(1, 2, requires_grad=True)), (torch.nn, torch.ones(1, 2, requires_grad=True))):
        net, order = make(lib), []
        for name, m in net.named_modules():
            m.register_full_backward_pre_hook(lambda m, go, name=name, order=order: order.append(("pre", name)))
            m.register_full_backward_hook(lambda m, gi, go, name=name, order=order: order.append(("full", name)))
        net(x).sum().backward()
        orders.append(order)
    assert orders[0] == orders[1]
    assert orders[0][0] == ("pre", "") and orders[0][-1] == ("full", "")


def test_prepend_and_remove():
    order = []
    layer = nn.Linear(2, 1)
    h1 = layer.register_full_backward_hook(lambda *a: order.append("first"))
    layer.register_full_backward_hook(lambda *a: order.append("prepended"), prepend=True)
    h3 = layer.register_full_backward_pre_hook(lambda *a: order.append("pre"))
    x = Tensor.ones(1, 2, requires_grad=True)
    layer(x).sum().backward()
    assert order == ["pre", "prepended", "first"]
    h1.remove()
    h3.remove()
    order.clear()
    layer(x).sum().backward()
    assert order == ["prepended"]


def test_removed_after_forward_still_runs_for_that_call():
    # as torch's: the hooks a call runs are the ones there at its forward
    for lib, x in ((nn, Tensor.ones(1, 2, requires_grad=True)), (torch.nn, torch.ones(1, 2, requires_grad=True))):
        seen = []
        layer = lib.Linear(2, 1)
        handle = layer.register_full_backward_hook(lambda *a, seen=seen: seen.append(1))
        y = layer(x)
        handle.remove()
        y.sum().backward()
        assert seen == [1]


def test_second_backward_and_two_calls():
    for lib, x in ((nn, Tensor.ones(1, 2, requires_grad=True)), (torch.nn, torch.ones(1, 2, requires_grad=True))):
        seen = []
        layer = lib.Linear(2, 2)
        layer.register_full_backward_hook(lambda m, gi, go, seen=seen: seen.append(go[0].tolist()))
        loss = (layer(x) * 2 + layer(x)).sum()
        loss.backward(retain_graph=True)
        loss.backward()
        assert sorted(seen) == [[[1.0, 1.0]], [[1.0, 1.0]], [[2.0, 2.0]], [[2.0, 2.0]]]


def test_double_backward_through_hooked_module():
    # create_graph: the input gradient can be differentiated again; the hooks don't run for the second pass
    results = []
    for lib, x in ((nn, Tensor(X, requires_grad=True)), (torch.nn, torch.tensor(X, requires_grad=True))):
        seen = []
        layer = lib.Sequential(lib.Linear(3, 4), lib.Tanh(), lib.Linear(4, 1)) if lib is torch.nn else None
        if layer is None:
            layer = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        layer.register_full_backward_hook(lambda m, gi, go, seen=seen: seen.append(len(gi)))
        out = layer(x).sum()
        (gx,) = (grad if lib is nn else torch.autograd.grad)(out, x, create_graph=True)
        (gx**2).sum().backward()
        results.append((seen, lib))
    assert results[0][0] == results[1][0] == [1]


def test_no_input_requires_grad():
    log_o, log_t = [], []
    ours, theirs = _linear_pair()
    for m, log in ((ours, log_o), (theirs, log_t)):
        full, pre = _recorder(log)
        m.register_full_backward_hook(full)
        m.register_full_backward_pre_hook(pre)
    with pytest.warns(UserWarning, match="none of the module's inputs requires grad"):
        ours(Tensor(X)).sum().backward()
    with pytest.warns(UserWarning):
        theirs(torch.tensor(X)).sum().backward()
    _same_log(log_o, log_t)
    ours.register_full_backward_hook(lambda m, gi, go: (Tensor.zeros(2, 3),))
    with (
        pytest.warns(UserWarning),
        pytest.raises(RuntimeError, match="with no input requiring grad .* must return None"),
    ):
        ours(Tensor(X)).sum().backward()


def test_no_grad_call_runs_no_hooks():
    seen = []
    layer = nn.Linear(3, 2)
    layer.register_full_backward_hook(lambda *a: seen.append(1))
    x = Tensor(X, requires_grad=True)
    from uopkit.tensor.grad_mode import no_grad

    with no_grad():
        y = layer(x)
    assert not y.requires_grad
    (layer(x).sum() + y.sum()).backward()
    assert seen == [1]


def test_in_place_is_an_error_as_torchs():
    relu = nn.ReLU(inplace=True)
    relu.register_full_backward_hook(lambda *a: None)
    x = Tensor([1.0, -1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="in-place write into tensor 0 that a module's backward hooks pass through"):
        relu(x * 1)
    layer = nn.Linear(2, 2)
    layer.register_full_backward_hook(lambda *a: None)
    with pytest.raises(RuntimeError, match="in-place write into tensor .* backward hooks pass through"):
        layer(x).add_(1)
    y = layer(x)
    with pytest.raises(RuntimeError, match="in-place write into tensor .* backward hooks pass through"):
        y[0].mul_(2)
    # a copy can be written
    y = layer(x).clone()
    y.add_(1)


def test_output_not_a_tensor_or_tuple():
    class Ours(nn.Module):
        def forward(self, a):
            return {"y": a * 2}

    seen = []
    m = Ours()
    m.register_full_backward_hook(lambda *a: seen.append(1))
    with pytest.warns(UserWarning, match="will not run: forward returned"):
        out = m(Tensor([1.0], requires_grad=True))
    out["y"].sum().backward()
    assert seen == []


def test_hook_result_errors():
    x = Tensor.ones(1, 2, requires_grad=True)
    layer = nn.Linear(2, 1)
    layer.register_full_backward_hook(lambda m, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="invalid number of grad_input, got 2, but expected 1"):
        layer(x).sum().backward()
    layer = nn.Linear(2, 1)
    layer.register_full_backward_pre_hook(lambda m, go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match="invalid number of grad_output, got 2, but expected 1"):
        layer(x).sum().backward()
    layer = nn.Linear(2, 1)
    layer.register_full_backward_hook(lambda m, gi, go: (Tensor.ones(3),))
    with pytest.raises(
        RuntimeError, match=r"returned a gradient of shape \(3,\) where one of shape \(1, 2\) was expected"
    ):
        layer(x).sum().backward()
    with pytest.raises(TypeError, match="callable"):
        layer.register_full_backward_hook(3)


def test_grad_cam_on_a_conv():
    # Grad-CAM: keep the conv's activations (forward hook) and grad_output (backward hook), weight and pool
    np.random.seed(0)
    img = np.random.randn(1, 2, 6, 6).astype(np.float32)
    theirs_conv, theirs_head = torch.nn.Conv2d(2, 3, 3), torch.nn.Linear(3 * 4 * 4, 2)
    ours_conv, ours_head = nn.Conv2d(2, 3, 3), nn.Linear(3 * 4 * 4, 2)
    for o, t in ((ours_conv, theirs_conv), (ours_head, theirs_head)):
        o.weight.assign(Tensor(t.weight.detach().numpy()))
        o.bias.assign(Tensor(t.bias.detach().numpy()))
    cams = []
    for conv, head, x in ((theirs_conv, theirs_head, torch.tensor(img)), (ours_conv, ours_head, Tensor(img))):
        kept = {}
        # (torch's activations are read without their graph)
        conv.register_forward_hook(lambda m, a, out, kept=kept: kept.update(act=out.detach()))
        conv.register_full_backward_hook(lambda m, gi, go, kept=kept: kept.update(grad=go[0]))
        score = head(conv(x).relu().reshape(1, -1))[0, 1]
        # (no input needs a gradient: the hook runs with grad_output, as torch's says)
        with pytest.warns(UserWarning):
            score.backward()
        weights = kept["grad"].mean((2, 3), keepdim=True)
        cams.append(np.asarray((weights * kept["act"]).sum(1).relu().tolist()))
    np.testing.assert_allclose(cams[0], cams[1], rtol=1e-4, atol=1e-5)


def test_deprecated_backward_hook():
    seen = []
    relu = nn.ReLU()
    relu.register_backward_hook(lambda m, gi, go: seen.append(_lists(gi) + _lists(go)))
    x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    (relu(x * 1) * Tensor([1.0, 2.0, 3.0])).sum().backward()
    xt = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    relu_t, seen_t = torch.nn.ReLU(), []
    relu_t.register_backward_hook(lambda m, gi, go: seen_t.append(_lists(gi) + _lists(go)))
    (relu_t(xt * 1) * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    _same(seen[0], seen_t[0])
    # never both kinds on one module, as torch's
    with pytest.raises(RuntimeError, match="already has backward hooks of the other kind"):
        relu.register_full_backward_hook(lambda *a: None)
    other = nn.ReLU()
    other.register_full_backward_hook(lambda *a: None)
    with pytest.raises(RuntimeError, match="of the other kind"):
        other.register_backward_hook(lambda *a: None)


def test_deprecated_backward_hook_allows_in_place_and_warns_for_non_tensors():
    # guided backprop's pattern: an in-place ReLU with the deprecated hook clamping the gradient
    relu = nn.ReLU(inplace=True)
    relu.register_backward_hook(lambda m, gi, go: (gi[0].clamp(min=0),))
    x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    h = x * 1
    out = relu(h)
    np.testing.assert_allclose(h.numpy(), [1.0, 0.0, 3.0])
    (out * Tensor([-1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 3.0])

    class Pair(nn.Module):
        def forward(self, a):
            return [a * 2]

    m = Pair()
    m.register_backward_hook(lambda *a: None)
    with pytest.warns(FutureWarning, match="not one tensor or a tuple of tensors"):
        m(x)


def test_post_accumulate_grad_hook_optimizer_in_backward():
    lr = 0.1
    results = []
    for tensor in (Tensor, torch.tensor):
        w = tensor([1.0, -2.0, 0.5], requires_grad=True)
        calls = []

        def step(p, calls=calls):
            calls.append(p.grad.tolist())
            p.sub_(p.grad * lr)
            p.grad = None

        handle = w.register_post_accumulate_grad_hook(step)
        for _ in range(2):
            (w * w * tensor([1.0, 2.0, 3.0])).sum().backward()
        handle.remove()
        (w * 1).sum().backward()
        results.append((w.tolist(), calls, w.grad.tolist()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-6)
    assert results[0][2] == results[1][2] == [1.0, 1.0, 1.0]


def test_post_accumulate_grad_hook_sees_accumulated_grad_and_errors():
    w = Tensor([1.0, 2.0], requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.tolist()))
    w.register_post_accumulate_grad_hook(lambda p: seen.append("second"))
    (w * 3).sum().backward()
    (w * 3).sum().backward()
    assert seen == [[3.0, 3.0], "second", [6.0, 6.0], "second"]
    # not for grad(), which accumulates nothing
    grad((w * 3).sum(), w)
    assert len(seen) == 4
    with pytest.raises(RuntimeError, match="does not require grad, so it never accumulates"):
        Tensor([1.0]).register_post_accumulate_grad_hook(lambda p: None)
    with pytest.raises(RuntimeError, match="only a leaf tensor accumulates"):
        (w * 2).register_post_accumulate_grad_hook(lambda p: None)


def test_post_accumulate_grad_hook_runs_without_grad_recording():
    w = Tensor([1.0, 2.0], requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append((p * 2).requires_grad))
    (w * 3).sum().backward()
    (w * 3).sum().backward(create_graph=True)
    assert seen == [False, True]


def test_warnings_not_raised_for_plain_use():
    layer = nn.Linear(3, 2)
    layer.register_full_backward_hook(lambda *a: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(Tensor(X, requires_grad=True)).sum().backward()
