"""jit.py: TinyJit capture and replay, compared with the same function run without the JIT."""

import numpy as np
import pytest

from uopkit import Tensor
from uopkit.jit import JitError, TinyJit


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def test_jit_matches_eager(rng):
    def f(x: Tensor, y: Tensor) -> Tensor:
        return ((x * y).relu() + x.sum(axis=1, keepdim=True)).realize()

    jf = TinyJit(f)
    for _ in range(5):
        x_np, y_np = rng.standard_normal((4, 6), dtype=np.float32), rng.standard_normal((4, 6), dtype=np.float32)
        want = f(Tensor(x_np), Tensor(y_np)).numpy()
        got = jf(Tensor(x_np), Tensor(y_np)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_allclose(got, np.maximum(x_np * y_np, 0) + x_np.sum(axis=1, keepdims=True), rtol=1e-5)
    assert jf.kernel_count >= 1


def test_replay_runs_captured_kernels_only(rng):
    calls = []

    @TinyJit
    def f(x: Tensor) -> Tensor:
        calls.append(1)
        return (x * 2).realize()

    for i in range(6):
        x_np = rng.random(8, dtype=np.float32)
        np.testing.assert_allclose(f(Tensor(x_np)).numpy(), x_np * 2)
        # the Python body runs for the warm-up and the capture only
        assert len(calls) == min(i + 1, 2)


def test_training_loop_with_in_place_updates(rng):
    # an SGD step on a linear least-squares model: parameters are updated in place every call
    w0 = rng.standard_normal((5, 1), dtype=np.float32)
    xs = [rng.standard_normal((16, 5), dtype=np.float32) for _ in range(6)]
    ys = [rng.standard_normal((16, 1), dtype=np.float32) for _ in range(6)]

    def make_step(w: Tensor):
        def step(x: Tensor, y: Tensor) -> Tensor:
            err = x @ w - y
            loss = (err * err).mean().realize()
            grad = x.T @ err * (2 / 16)
            w.assign(w - grad * 0.1).realize()
            return loss

        return step

    w_eager, w_jit = Tensor(w0.copy()).realize(), Tensor(w0.copy()).realize()
    eager, jitted = make_step(w_eager), TinyJit(make_step(w_jit))
    w_np = w0.copy()
    for x_np, y_np in zip(xs, ys, strict=True):
        err = x_np @ w_np - y_np
        loss_np = (err * err).mean()
        w_np = w_np - x_np.T @ err * (2 / 16) * 0.1
        l_e = eager(Tensor(x_np), Tensor(y_np)).item()
        l_j = jitted(Tensor(x_np), Tensor(y_np)).item()
        assert l_j == pytest.approx(l_e, rel=1e-6)
        assert l_j == pytest.approx(loss_np, rel=1e-4)
        np.testing.assert_allclose(w_jit.numpy(), w_eager.numpy(), rtol=1e-6)
        np.testing.assert_allclose(w_jit.numpy(), w_np, rtol=1e-4, atol=1e-6)


def test_multiple_outputs_and_kwargs(rng):
    @TinyJit
    def f(x: Tensor, *, y: Tensor) -> tuple[Tensor, Tensor]:
        return (x + y).realize(), (x * y).sum().realize()

    for _ in range(4):
        x_np, y_np = rng.random(5, dtype=np.float32), rng.random(5, dtype=np.float32)
        s, p = f(Tensor(x_np), y=Tensor(y_np))
        np.testing.assert_allclose(s.numpy(), x_np + y_np)
        assert p.item() == pytest.approx(float((x_np * y_np).sum()), rel=1e-5)


def test_view_inputs_are_made_contiguous(rng):
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x + 1).realize()

    for _ in range(4):
        x_np = rng.random((3, 4), dtype=np.float32)
        np.testing.assert_allclose(f(Tensor(x_np).T).numpy(), x_np.T + 1)


def test_returning_an_input_view(rng):
    @TinyJit
    def f(x: Tensor) -> Tensor:
        (x * 2).realize()
        return x.reshape(2, 2)

    for _ in range(4):
        x_np = rng.random(4, dtype=np.float32)
        np.testing.assert_allclose(f(Tensor(x_np)).numpy(), x_np.reshape(2, 2))


def test_shape_change_is_an_error():
    f = TinyJit(lambda x: (x + 1).realize())
    for _ in range(3):
        f(Tensor(np.zeros(4, np.float32)))
    with pytest.raises(JitError, match=r"changed from shape \(4,\)"):
        f(Tensor(np.zeros(5, np.float32)))
    with pytest.raises(JitError, match="int"):
        f(Tensor(np.zeros(4, np.int32)))
    with pytest.raises(JitError, match="1 Tensor arguments, called with 2"):
        f(Tensor(np.zeros(4, np.float32)), Tensor(np.zeros(4, np.float32)))
    # reset forgets the capture: new shapes work again
    f.reset()
    np.testing.assert_allclose(f(Tensor(np.zeros(5, np.float32))).numpy(), np.ones(5))


def test_changed_constant_argument_is_an_error():
    f = TinyJit(lambda x, k: (x * k).realize())
    for _ in range(3):
        f(Tensor(np.ones(4, np.float32)), 2.0)
    with pytest.raises(JitError, match="non-Tensor arguments changed"):
        f(Tensor(np.ones(4, np.float32)), 3.0)


def test_nested_jit(rng):
    inner = TinyJit(lambda x: (x * 3).realize())

    @TinyJit
    def outer(x: Tensor) -> Tensor:
        return (inner(x) + 1).realize()

    for _ in range(5):
        x_np = rng.random(6, dtype=np.float32)
        np.testing.assert_allclose(outer(Tensor(x_np)).numpy(), x_np * 3 + 1, rtol=1e-6)


def test_arguments_aliased_at_capture_are_not_aliased_on_replay(rng):
    # captured with one tensor in both slots (x - x may fold to zero): distinct arguments later get their own capture
    f = TinyJit(lambda a, b: (a - b).realize())
    x = Tensor(rng.random(6, dtype=np.float32))
    for _ in range(3):
        np.testing.assert_allclose(f(x, x).numpy(), np.zeros(6))
    for _ in range(3):
        y_np, z_np = rng.random(6, dtype=np.float32), rng.random(6, dtype=np.float32)
        np.testing.assert_allclose(f(Tensor(y_np), Tensor(z_np)).numpy(), y_np - z_np)
        # and the aliased form still replays its own capture
        np.testing.assert_allclose(f(Tensor(y_np), Tensor(y_np)).numpy(), np.zeros(6))
    assert len(f.captures) == 2


def test_arguments_aliased_only_on_replay(rng):
    # captured with distinct tensors, replayed with one tensor in both slots, one of which the function updates
    def f(acc: Tensor, x: Tensor) -> Tensor:
        acc.assign(acc + x).realize()
        return (acc * 1).realize()

    jf = TinyJit(f)
    for _ in range(3):
        a_np, x_np = rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32)
        np.testing.assert_allclose(jf(Tensor(a_np), Tensor(x_np)).numpy(), a_np + x_np, rtol=1e-6)
    for _ in range(2):
        a_np = rng.random(4, dtype=np.float32)
        a = Tensor(a_np)
        np.testing.assert_allclose(jf(a, a).numpy(), f(Tensor(a_np), Tensor(a_np)).numpy(), rtol=1e-6)


def test_global_tensor_rebound_after_capture_is_reported(rng):
    scale = {"w": Tensor(np.full(4, 2.0, np.float32)).realize()}

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x * scale["w"]).realize()

    for _ in range(3):
        np.testing.assert_allclose(f(Tensor(np.ones(4, np.float32))).numpy(), np.full(4, 2.0))
    # updating in place is seen by the replays
    scale["w"].assign(Tensor(np.full(4, 3.0, np.float32))).realize()
    np.testing.assert_allclose(f(Tensor(np.ones(4, np.float32))).numpy(), np.full(4, 3.0))
    # rebinding to a new tensor is not: the replay refuses instead of reading the old buffer
    scale["w"] = Tensor(np.full(4, 5.0, np.float32)).realize()
    with pytest.raises(JitError, match=r"shape \(4,\) .*float.*rebound to new storage or freed.*assign"):
        f(Tensor(np.ones(4, np.float32)))
    f.reset()
    for _ in range(3):
        np.testing.assert_allclose(f(Tensor(np.ones(4, np.float32))).numpy(), np.full(4, 5.0))


def test_replay_prepares_each_launch_again_when_its_input_buffer_changes():
    # a replay keeps each launch's prepared call while the input buffers are the same, and prepares it again when
    # another buffer comes (in any order, back to an earlier one too)
    f = TinyJit(lambda x: (x * 2 + 1).realize())
    xs = [Tensor(np.full(4, float(i), np.float32)).realize() for i in range(3)]
    for i in (0, 0, 1, 1, 2, 0, 2, 2, 1):
        assert f(xs[i]).tolist() == [2.0 * i + 1] * 4


def test_launch_replayed_inside_a_capture_leaves_the_prepared_call_right():
    # the inner jit's launch runs on the outer capture's input without touching the call prepared for the inner
    # replays: calling the inner jit on that input afterwards computes on it, not on the buffer prepared before
    inner = TinyJit(lambda x: (x * 3).realize())
    outer = TinyJit(lambda x: inner(x))
    xs = [Tensor(np.full(4, float(i + 1), np.float32)).realize() for i in range(4)]
    for i in (0, 0, 1):
        assert inner(xs[i]).tolist() == [3.0 * (i + 1)] * 4
    for i in (2, 3, 2):
        assert outer(xs[i]).tolist() == [3.0 * (i + 1)] * 4
    for i in (3, 2, 1):
        assert inner(xs[i]).tolist() == [3.0 * (i + 1)] * 4


def test_repeated_arguments_replay_without_the_checks_and_follow_their_contents():
    # a call with the tensors (uops) of the latest replay takes a shortcut past the argument checks: it must still
    # read what the tensors hold now, and any other call goes through the checks
    f = TinyJit(lambda x, y: (x * 2 + y).realize())
    x, y = Tensor(np.ones(4, np.float32)).realize(), Tensor(np.zeros(4, np.float32)).realize()
    for _ in range(3):
        assert f(x, y).tolist() == [2.0] * 4
    assert f.last is not None
    # in place: the same uops, new contents
    x.assign(Tensor(np.full(4, 5.0, np.float32))).realize()
    assert f(x, y).tolist() == [10.0] * 4
    # a view of the same buffer is another uop: made contiguous through the usual path
    assert f(x.reshape(2, 2).reshape(4), y).tolist() == [10.0] * 4
    # arguments swapped, or aliased, are other calls
    assert f(y, x).tolist() == [5.0] * 4
    assert f(x, x).tolist() == [15.0] * 4
    # rebound to another shape: still an error
    x.uop = Tensor(np.ones(5, np.float32)).realize().uop
    with pytest.raises(JitError, match=r"changed from shape \(4,\)"):
        f(x, y)
    f.reset()
    assert f.last is None


def test_batchnorm_forward_jitted_in_train_then_eval_mode_as_torch(rng):
    # each mode gets a capture of its own, and the running statistics a call updates (nothing in the function realizes
    # them) are updated by every replay, once each, as PyTorch's eager BatchNorm does
    torch = pytest.importorskip("torch")
    from uopkit.nn import BatchNorm2d

    ours, theirs = BatchNorm2d(2), torch.nn.BatchNorm2d(2)
    fwd = TinyJit(lambda x: ours(x).realize())
    for training in (True, False, True, False):
        theirs.train(training)
        ours.train(training)
        for _ in range(3):
            x = rng.standard_normal((3, 2, 2, 2), dtype=np.float32) * 3 + 1
            got = fwd(Tensor(x)).numpy()
            np.testing.assert_allclose(got, theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-6)
    assert int(ours.num_batches_tracked.item()) == 6


def test_random_values_are_drawn_again_by_every_replay_as_without_the_jit():
    # Tensor.rand and friends draw on the host into a buffer the kernels read: a replay refills it, so jitted training
    # with dropout gets a new mask per step (the captured one was reused by every replay), the same as without the JIT
    def f(x: Tensor) -> Tensor:
        noise = Tensor.randn(6) + Tensor.randint(6, low=0, high=100) + Tensor.randperm(6)
        return (x.dropout(0.5) + noise).realize()

    results = []
    for fn in (f, TinyJit(f)):
        Tensor.manual_seed(3)
        with Tensor.train():
            results.append([fn(Tensor.ones(6).contiguous()).numpy() for _ in range(5)])
    np.testing.assert_array_equal(np.stack(results[1]), np.stack(results[0]))
    assert len({r.tobytes() for r in results[1]}) == 5


def test_multinomial_in_a_jitted_function_raises_instead_of_replaying_its_sample():
    # it samples on the host from weights read back: every replay returned the captured sample
    sample = TinyJit(lambda p: p.multinomial(1).realize())
    assert sample(Tensor([0.0, 1.0])).tolist() == [1]
    with pytest.raises(RuntimeError, match="multinomial: .*TinyJit"):
        sample(Tensor([1.0, 0.0]))


def test_a_returned_random_draw_is_drawn_again_by_every_replay():
    @TinyJit
    def draw():
        return Tensor.rand(3)

    values = {tuple(draw().tolist()) for _ in range(4)}
    assert len(values) == 4


class _Scaled:
    def __init__(self, scale: float) -> None:
        self.w = Tensor.full((4,), scale).contiguous().realize()

    @TinyJit
    def __call__(self, x: Tensor) -> Tensor:
        return (x * self.w).realize()


@pytest.mark.usefixtures("gc_of_this_test")
def test_a_jitted_method_captures_per_instance():
    # each instance replays its own weights (a second instance was refused: its `self` was a baked-in argument)
    a, b = _Scaled(1.0), _Scaled(2.0)
    for i in range(4):
        x = Tensor.full((4,), float(i)).contiguous().realize()
        assert a(x).tolist() == [float(i)] * 4
        assert b(x).tolist() == [2.0 * i] * 4
    assert a.__call__.kernel_count == 1 and b.__call__.kernel_count == 1
    a.w += 10
    assert a(Tensor.ones(4).realize()).tolist() == [11.0] * 4
    # the instance isn't kept alive by the decorator
    import gc
    import weakref

    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is None


def test_a_jitted_method_of_an_unhashable_instance_refuses_another_instance():
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __init__(self, v: float) -> None:
            self.w = Tensor.full((2,), v).contiguous().realize()

        @TinyJit
        def f(self, x: Tensor) -> Tensor:
            return (x + self.w).realize()

    u1, u2 = Unhashable(1.0), Unhashable(5.0)
    x = Tensor.ones(2).contiguous().realize()
    for _ in range(3):
        assert u1.f(x).tolist() == [2.0, 2.0]
    with pytest.raises(JitError, match="non-Tensor arguments changed"):
        u2.f(x)


def test_tensors_inside_list_tuple_and_dict_arguments_are_inputs():
    @TinyJit
    def f(xs: list, pair: tuple, named: dict) -> Tensor:
        return (xs[0] + xs[1] * pair[1] + named["b"]).realize()

    for i in range(5):
        a = Tensor.full((3,), float(i)).contiguous().realize()
        b = Tensor.ones(3).contiguous().realize()
        out = f([a, b], (None, Tensor.full((3,), 2.0).realize()), {"b": b * i})
        assert out.tolist() == [2.0 * i + 2.0] * 3
    assert f.kernel_count >= 1
    with pytest.raises(JitError, match=r"\(0, 1\) changed from shape \(3,\)"):
        f([a, Tensor.ones(4).realize()], (None, b), {"b": b})
    with pytest.raises(JitError, match="non-Tensor arguments changed"):
        f((a, b), (None, b), {"b": b})


@pytest.mark.parametrize("unfreeze_before_call", [0, 1])
def test_jitted_step_trains_a_layer_frozen_when_the_optimizer_was_built(rng, unfreeze_before_call):
    # the optimizer makes a frozen parameter's state at its first step with a gradient (as torch's): in the warm-up
    # call or in the capture, and the replays read and update it as the steps without the JIT do
    from uopkit.nn import Linear
    from uopkit.nn.optim import Adam

    xs = [rng.standard_normal((8, 4), dtype=np.float32) for _ in range(5)]
    ys = [rng.standard_normal((8, 2), dtype=np.float32) for _ in range(5)]
    Tensor.manual_seed(1)
    first, second = Linear(4, 6), Linear(6, 2)
    weights = [t.numpy() for t in (first.weight, first.bias, second.weight, second.bias)]

    def run(jit: bool) -> list[np.ndarray]:
        for t, w in zip((first.weight, first.bias, second.weight, second.bias), weights, strict=True):
            t.assign(Tensor(w)).realize()
        first.weight.requires_grad_(False)
        opt = Adam([first.weight, first.bias, second.weight, second.bias], lr=0.05, weight_decay=0.1)

        def step(x: Tensor, y: Tensor) -> Tensor:
            opt.zero_grad()
            loss = ((second(first(x).relu()) - y) ** 2).mean()
            loss.backward()
            Tensor.realize(loss, *opt.schedule_step())
            return loss

        f = TinyJit(step) if jit else step
        losses = []
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            if i == unfreeze_before_call:
                first.weight.requires_grad_(True)
            losses.append(f(Tensor(x), Tensor(y)).item())
        return losses + [t.numpy() for t in (first.weight, first.bias, second.weight, second.bias)]

    for got, want in zip(run(jit=True), run(jit=False), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------------------------------------
# `.grad` across replays: a jitted backward() with zero_grad()/step() outside (torch's loop) and its variants, each
# compared with the same loop without the JIT and with torch


def _grad_loop(lib: str, loop: str, set_to_none: bool, opt_name: str, jit: bool, steps: int = 7) -> list:
    """Train a small MLP `steps` steps with `loop`'s placement of backward/zero_grad/step; the losses, every parameter's
    `.grad` after each call (zeros of shape (1,) for None) and the final weights."""
    torch = pytest.importorskip("torch")
    import uopkit.nn as unn
    import uopkit.nn.functional as F

    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((8, 6)).astype(np.float32) for _ in range(3 * steps + 1)]
    ys = [rng.integers(0, 3, 8) for _ in range(3 * steps + 1)]
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    if lib == "torch":
        model, optim, arr, loss_fn = tm, torch.optim, torch.tensor, torch.nn.functional.cross_entropy
    else:
        model = unn.Sequential(unn.Linear(6, 8), unn.ReLU(), unn.Linear(8, 3))
        model.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
        optim, arr, loss_fn = unn.optim, Tensor, F.cross_entropy
    params = list(model.parameters())
    if loop == "frozen":
        params[0].requires_grad_(False)
    if loop == "hooks":

        def clip(p) -> None:
            p.grad.clamp_(-0.05, 0.05)

        params[2].register_hook(lambda g: g * 0.5)
        params[3].register_post_accumulate_grad_hook(clip)
    opt = optim.SGD(params, lr=0.1, momentum=0.9) if opt_name == "sgd" else optim.Adam(params, lr=0.01)

    def fwd_bwd(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        if loop == "step_inside":
            opt.step()
        return loss if lib == "torch" else loss.realize()

    f = TinyJit(fwd_bwd) if jit else fwd_bwd
    out: list = []
    batches = iter(zip(xs, ys, strict=True))

    def call() -> None:
        x, y = next(batches)
        out.append(f(arr(x), arr(y)).item())

    def grads() -> None:
        out.extend(np.zeros(1) if p.grad is None else p.grad.numpy().copy() for p in params)

    if loop == "grad_before":
        loss_fn(model(arr(xs[-1])), arr(ys[-1])).backward()
    for _ in range(steps):
        if loop != "grad_before":
            opt.zero_grad(set_to_none=set_to_none)
        for _ in range({"accumulate2": 2, "accumulate3": 3}.get(loop, 1)):
            call()
        grads()
        if loop != "step_inside":
            opt.step()
        if loop == "grad_before":
            opt.zero_grad(set_to_none=set_to_none)
    return out + [p.detach().numpy().copy() for p in params]


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize(
    "loop", ["outside", "accumulate2", "accumulate3", "grad_before", "frozen", "hooks", "step_inside"]
)
def test_replay_binds_grad_as_the_loop_without_jit(loop, set_to_none, opt_name):
    # backward() in the jitted function, zero_grad()/step() outside (or the step inside): every replay's gradient
    # reaches `.grad` (it stayed None or stale: training stopped at the first replay), and accumulates into the `.grad`
    # of the time over micro-batches
    want = _grad_loop("torch", loop, set_to_none, opt_name, jit=False)
    eager = _grad_loop("uopkit", loop, set_to_none, opt_name, jit=False)
    got = _grad_loop("uopkit", loop, set_to_none, opt_name, jit=True)
    for g, e, w in zip(got, eager, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("set_to_none", [True, False])
def test_jitted_step_reads_the_grad_of_the_call(set_to_none):
    # backward() outside, the step jitted: the replay's kernels read the `.grad` each parameter has now, not the
    # capture's
    import uopkit.nn as unn

    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((8, 6)).astype(np.float32) for _ in range(7)]

    def run(jit: bool) -> np.ndarray:
        Tensor.manual_seed(0)
        layer = unn.Linear(6, 3)
        opt = unn.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)

        def step() -> Tensor:
            opt.step()
            return layer.weight.sum().realize()

        f = TinyJit(step) if jit else step
        for x in xs:
            opt.zero_grad(set_to_none=set_to_none)
            (layer(Tensor(x)) ** 2).mean().backward()
            f()
        return layer.weight.numpy()

    np.testing.assert_allclose(run(jit=True), run(jit=False), rtol=1e-6, atol=1e-7)


def test_grads_set_inside_add_no_work_to_a_replay():
    # the tinygrad step (zero_grad, backward and step inside): `.grad` is rebound to the replayed gradients with no
    # kernel, copy or schedule beyond the captured launches
    from uopkit.helpers import GlobalCounters
    from uopkit.nn import Linear
    from uopkit.nn.optim import Adam

    rng = np.random.default_rng(2)
    layer = Linear(4, 2)
    opt = Adam(layer.parameters(), lr=0.01)

    @TinyJit
    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (layer(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.realize()

    for i in range(5):
        x = rng.standard_normal((8, 4)).astype(np.float32)
        w, b = layer.weight.numpy(), layer.bias.numpy()
        GlobalCounters.reset()
        step(Tensor(x))
        if i >= 2:
            assert GlobalCounters.kernel_count == step.kernel_count
        # this call's gradient of mean((x W^T + b)^2), at the weights before its step
        np.testing.assert_allclose(layer.weight.grad.numpy(), (x @ w.T + b).T @ x / 8, rtol=1e-5, atol=1e-6)


def test_grads_of_another_kind_every_call_raise():
    w = Tensor([1.0, 1.0, 1.0], requires_grad=True)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        loss = (w * x).sum()
        loss.backward()
        return loss.realize()

    x = Tensor([1.0, 2.0, 3.0]).realize()
    with pytest.raises(JitError, match="differ from all 8 captures"):
        for i in range(20):
            # a constant gradient of another value before every call: each call is captured anew
            w.grad = Tensor.full((3,), float(i))
            f(x)
            np.testing.assert_allclose(w.grad.numpy(), [i + 1.0, i + 2.0, i + 3.0])
    assert i == 9


def test_a_jitted_lookup_under_no_grad_loops_over_its_outputs_only(rng):
    # inference with a trainable table: under no_grad the lookup's one-hot sum over the table was cut into partial
    # sums (every index compared with every row); captured and replayed it is one load per element, as with gradients
    import uopkit
    import uopkit.nn.functional as F
    from uopkit.uop.ops import Ops

    table = rng.standard_normal((20000, 8), dtype=np.float32)
    w = Tensor(table, requires_grad=True)
    captured = []
    for grad in (True, False):

        @TinyJit
        def lookup(i: Tensor, grad: bool = grad) -> Tensor:
            with uopkit.set_grad_enabled(grad):
                return F.embedding(i, w).realize()

        for _ in range(4):
            idx = rng.integers(0, 20000, 300)
            np.testing.assert_array_equal(lookup(Tensor(idx)).numpy(), table[idx])
        captured.append({ln.item.runner.spec.name: ln for ln in lookup.captured.launches})
    with_grad, without = captured
    assert without.keys() == with_grad.keys()
    # (the other kernel checks the indices are in range)
    (picks,) = [ln.item.runner for ln in without.values() if ln.item.bufs[0].size == 300 * 8]
    # (a compiled runner keeps no linear program: it is built again from the kernel's AST)
    from uopkit.codegen import get_program
    from uopkit.device import Device
    from uopkit.engine.realize import method_cache

    (ast,) = [ast for (ast, _), r in method_cache.items() if r is picks]
    loops = [u.src[0].arg for u in get_program(ast, Device[w.device].renderer).uops if u.op is Ops.RANGE]
    assert np.prod(loops) <= 300 * 8, loops
