"""no_grad, enable_grad, set_grad_enabled, inference_mode against torch's: what is cut from the gradient, how the
switches nest and restore, and that views stay views."""

import threading

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, dtypes, enable_grad, inference_mode, is_grad_enabled, nn, no_grad, set_grad_enabled
from uopkit.nn.state import load_state_dict

torch = pytest.importorskip("torch")


def test_a_target_computed_without_gradients_is_cut():
    # a DQN-style target from the same network: no gradient flows through it, as torch's
    torch.manual_seed(0)
    theirs = torch.nn.Linear(3, 2)
    ours = nn.Linear(3, 2)
    load_state_dict(ours, {k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    with no_grad():
        target = ours(Tensor(x)).max(axis=1) * 0.9
    with torch.no_grad():
        ttarget = theirs(torch.tensor(x)).max(dim=1).values * 0.9
    ((ours(Tensor(x))[:, 0] - target) ** 2).mean().backward()
    ((theirs(torch.tensor(x))[:, 0] - ttarget) ** 2).mean().backward()
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.bias.grad.numpy(), theirs.bias.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert not target.requires_grad


def test_a_result_whose_last_node_is_a_view_is_cut_under_no_grad():
    # a matmul (`x @ W`) or `sum(dim)` computed under no_grad ends in a reshape of its reduce: only the reshape was
    # kept as a view, so the value required grad and the gradient flowed into it (W's gradient doubled below)
    w = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)
    x = np.array([[1.0, 0.5]], np.float32)
    grads = []
    for T, off in ((Tensor, no_grad), (torch, torch.no_grad)):
        W = Tensor(w, requires_grad=True) if T is Tensor else torch.tensor(w, requires_grad=True)
        X = Tensor(x) if T is Tensor else torch.tensor(x)
        with off():
            t, s = X @ W, W.sum(0)
        assert not t.requires_grad and not s.requires_grad
        ((X @ W) * t + W * s).sum().backward()
        grads.append(W.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1])


def test_manual_update_and_views_under_no_grad():
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (w * w).sum().backward()
    with no_grad():
        w -= 0.5 * w.grad
        first = w[:1]
        first *= 0  # a view stays a view: the write shows in w
    assert w.tolist() == [0.0, 0.0, 0.0] and w.requires_grad
    w.grad = None
    (w * 2 + 1).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]


def test_switches_nest_and_restore():
    assert is_grad_enabled()
    with no_grad():
        assert not is_grad_enabled()
        with enable_grad():
            assert is_grad_enabled()
            x = Tensor([2.0], requires_grad=True)
            y = x * x
        assert not is_grad_enabled()
    assert is_grad_enabled()
    y.backward()
    assert x.grad.tolist() == [4.0]
    with pytest.raises(ZeroDivisionError):
        with no_grad():
            raise ZeroDivisionError
    assert is_grad_enabled()
    switch = set_grad_enabled(False)
    assert not is_grad_enabled()
    set_grad_enabled(True)
    assert is_grad_enabled()
    with set_grad_enabled(False):
        assert not is_grad_enabled()
    assert is_grad_enabled() and switch.enabled is False
    with inference_mode():
        assert not is_grad_enabled()
    with inference_mode(False):
        assert is_grad_enabled()
    with pytest.raises(TypeError, match="bool"):
        set_grad_enabled("no")
    assert uopkit.no_grad is no_grad and Tensor.no_grad == False  # noqa: E712 (tinygrad's flag, 0 or 1)


def test_decorators():
    x = Tensor([3.0], requires_grad=True)

    @no_grad()
    def cut(t, depth=1):
        assert not is_grad_enabled()
        return t * 2 if depth == 0 else cut(t, depth - 1)

    @enable_grad()
    def kept(t):
        return t * 2

    (x * cut(x)).sum().backward()
    assert x.grad.tolist() == [6.0] and is_grad_enabled()
    x.grad = None
    with no_grad():
        y = kept(x)
    y.sum().backward()
    assert x.grad.tolist() == [2.0]


def test_backward_of_a_value_computed_without_gradients_raises():
    x = Tensor([1.0], requires_grad=True)
    with no_grad():
        y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="require a gradient"):
        y.backward()


def test_backward_through_only_detached_values_raises():
    # the loss is computed outside no_grad, but from a value computed inside it: no gradient can reach x (torch raises)
    x = Tensor([0.0, 1.0], requires_grad=True)
    with no_grad():
        y = x * 2
    with pytest.raises(RuntimeError, match="no gradient reaches"):
        y.sum().backward()
    with pytest.raises(RuntimeError, match="no gradient reaches"):
        (x.argmax() * 1.0).backward()


def test_decorators_without_the_call():
    x = Tensor([3.0], requires_grad=True)

    @no_grad
    def cut(t):
        return t * 2

    @inference_mode
    def also_cut(t):
        return t * 2

    @enable_grad
    def kept(t):
        return t * 2

    assert cut.__name__ == "cut" and also_cut.__name__ == "also_cut"
    (x * cut(x) + x * also_cut(x)).sum().backward()
    assert x.grad.tolist() == [12.0]
    x.grad = None
    with no_grad():
        y = kept(x)
    y.sum().backward()
    assert x.grad.tolist() == [2.0]


def test_inference_mode_false_turns_recording_back_on():
    # as torch's: inference_mode(False) records gradients inside inference_mode() or no_grad(), as a block or a
    # decorator, and the mode from before comes back after it
    x = Tensor([1.0, 2.0], requires_grad=True)
    with inference_mode(), torch.inference_mode():
        with inference_mode(False), torch.inference_mode(False):
            assert is_grad_enabled() and torch.is_grad_enabled()
            y = (x * 3).sum()
        assert not is_grad_enabled()
    y.backward()
    assert x.grad.tolist() == [3.0, 3.0]

    @inference_mode(False)
    def recorded(t):
        return is_grad_enabled(), (t * t).sum()

    with no_grad(), torch.no_grad():
        with torch.inference_mode(False):
            assert torch.is_grad_enabled()
        enabled, z = recorded(x)
        assert enabled and not is_grad_enabled()
    x.grad = None
    z.backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_a_method_first_called_under_no_grad_still_carries_gradients_after():
    # elementwise methods replay a graph recorded per input signature: one recorded under no_grad (a validation pass)
    # ends in a DETACH that a call with gradients on must not get
    import uopkit.nn.functional as F

    fns = [Tensor.silu, Tensor.gelu, Tensor.sigmoid, Tensor.tanh, F.softplus, F.mish, F.logsigmoid]
    fns += [lambda t: t.softmax(-1), lambda t: t.log_softmax(-1), F.normalize, lambda t: F.leaky_relu(t, 0.1)]
    for i, fn in enumerate(fns):
        x = Tensor.randn(3, 5 + i)
        with no_grad():
            fn(x)
        w = Tensor.randn(3, 5 + i, requires_grad=True)
        (fn(x * w) * Tensor.randn(3, 5 + i)).sum().backward()
        assert w.grad is not None, i
        assert np.abs(w.grad.numpy()).max() > 0, i


def test_the_mode_is_per_thread():
    # as torch's: a switch in one thread leaves the others as they are, and a new thread starts recording. Two
    # threads' overlapping no_grad blocks left recording off for the whole process; an evaluation thread inside
    # no_grad cut the main thread's training graph
    import threading
    from concurrent.futures import ThreadPoolExecutor

    inside, leave = threading.Event(), threading.Event()
    seen = {}

    def evaluate():
        with no_grad(), torch.no_grad():
            seen["evaluator"] = (is_grad_enabled(), torch.is_grad_enabled())
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=evaluate)
    thread.start()
    assert inside.wait(30)
    w = Tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    seen["main"] = (is_grad_enabled(), torch.is_grad_enabled())
    leave.set()
    thread.join(30)
    assert seen == {"evaluator": (False, False), "main": (True, True)}
    loss.backward()
    assert w.grad.tolist() == [2.0, 4.0]

    # a new thread starts recording whatever the thread that made it has; Tensor.no_grad is the calling thread's
    def modes():
        return is_grad_enabled(), torch.is_grad_enabled(), Tensor.no_grad

    with no_grad(), torch.no_grad(), ThreadPoolExecutor(2) as pool:
        assert pool.submit(modes).result() == (True, True, False)
        assert Tensor.no_grad == True  # noqa: E712
    Tensor.no_grad = True
    try:
        assert not is_grad_enabled() and _mode_in_a_new_thread() == (True, False)
    finally:
        Tensor.no_grad = False
    assert is_grad_enabled()

    # overlapping blocks in two threads, and a pool running inference: recording is back on in every thread after
    def infer(i):
        with no_grad():
            return (w * i).sum().numpy()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(infer, range(32)))
    w.grad = None
    (w * 3).sum().backward()
    assert is_grad_enabled() and w.grad.tolist() == [3.0, 3.0]


def _mode_in_a_new_thread():
    # (a fresh thread's view of the mode while the caller has it off)
    import threading

    out = []
    thread = threading.Thread(target=lambda: out.append((is_grad_enabled(), Tensor.no_grad)))
    thread.start()
    thread.join(30)
    return out[0]


def test_tensor_no_grad_is_the_flag_and_torchs_switch():
    # tinygrad reads and sets `Tensor.no_grad`; a port that renamed `torch.no_grad` calls it: both work
    w = Tensor([1.0, 2.0], requires_grad=True)
    assert not Tensor.no_grad and repr(Tensor.no_grad) == "False"
    with Tensor.no_grad():
        assert Tensor.no_grad and repr(Tensor.no_grad) == "True"
        assert not (w * 2).requires_grad
    assert not Tensor.no_grad and (w * 2).requires_grad

    @Tensor.no_grad
    def bare():
        return w * 3

    @Tensor.no_grad()
    def called():
        return w * 3

    assert not bare().requires_grad and not called().requires_grad and (w * 3).requires_grad
    previous = Tensor.no_grad
    Tensor.no_grad = True
    try:
        assert not (w * 2).requires_grad and f"{Tensor.no_grad}" == "True"
    finally:
        Tensor.no_grad = previous
    assert (w * 2).requires_grad


def test_decorated_generator_functions_switch_while_their_body_runs():
    # torch switches at each resume of a decorated generator function, not only while the generator is made: its
    # body computes without gradients, and the caller's mode is back at every yield
    theirs, ours = torch.nn.Linear(3, 2), nn.Linear(3, 2)

    def predictions(enabled, model, ones):
        for _ in range(2):
            out = model(ones(1, 3))
            sent = yield enabled(), out.requires_grad
            yield sent, enabled()

    def run(switch, enabled, model, ones):
        gen = switch(predictions)(enabled, model, ones)
        first = next(gen)
        caller = enabled()
        second = gen.send("x")
        return first, caller, second, list(gen)

    for ours_switch, theirs_switch in [
        (no_grad(), torch.no_grad()),
        (no_grad, torch.no_grad),
        (inference_mode(), torch.inference_mode()),
    ]:
        got = run(ours_switch, is_grad_enabled, ours, Tensor.ones)
        expected = run(theirs_switch, torch.is_grad_enabled, theirs, torch.ones)
        assert got == expected == ((False, False), True, ("x", False), [(False, False), (None, False)])
    with no_grad(), torch.no_grad():
        got = run(enable_grad(), is_grad_enabled, ours, Tensor.ones)
        expected = run(torch.enable_grad(), torch.is_grad_enabled, theirs, torch.ones)
        assert got == expected and got[0] == (True, True) and got[1] is False

    # an exception thrown in reaches the body inside the switch; close() runs its cleanup inside it too
    log = []

    @no_grad()
    def body():
        try:
            yield 1
        except KeyError:
            log.append(("caught", is_grad_enabled()))
            yield 2
        finally:
            log.append(("closed", is_grad_enabled()))

    gen = body()
    assert next(gen) == 1 and gen.throw(KeyError("k")) == 2
    gen.close()
    assert log == [("caught", False), ("closed", False)] and is_grad_enabled()

    @no_grad()
    def returns():
        yield 1
        return "done"

    def outer():
        return (yield from returns())

    gen = outer()
    next(gen)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == "done"


def test_set_grad_enabled_as_a_decorator_switches_for_each_call_only():
    # torch's: the call that makes the decorator leaves the mode as it was
    @set_grad_enabled(False)
    def cut():
        return is_grad_enabled()

    @torch.set_grad_enabled(False)
    def their_cut():
        return torch.is_grad_enabled()

    assert (is_grad_enabled(), torch.is_grad_enabled()) == (True, True)
    assert (cut(), their_cut()) == (False, False)
    assert (is_grad_enabled(), torch.is_grad_enabled()) == (True, True)


def _inference_mode_states(lib):
    # is_inference_mode_enabled through nested switches, decorators, a generator and a new thread
    seen = [lib.is_inference_mode_enabled()]
    on = lib.is_inference_mode_enabled
    with lib.inference_mode():
        seen.append(on())
        with lib.enable_grad():
            seen.append(on())
        with lib.inference_mode(False):
            seen.append((on(), lib.is_grad_enabled()))
        with lib.no_grad():
            seen.append(on())
        thread_saw = []
        worker = threading.Thread(target=lambda: thread_saw.append(on()))
        worker.start()
        worker.join()
        seen.append(thread_saw)
    with lib.no_grad(), lib.set_grad_enabled(False):
        seen.append(on())

    def steps():
        yield on()
        yield on()

    seen += [lib.inference_mode()(on)(), lib.inference_mode(on)(), list(lib.inference_mode()(steps)()), on()]
    return seen


def test_is_inference_mode_enabled_as_torchs():
    assert _inference_mode_states(uopkit) == _inference_mode_states(torch)


def test_saved_tensors_hooks_are_refused_and_offloading_is_a_no_op():
    # uopkit saves no tensors for backward: hooks that would never run are refused with the reason; save_on_cpu only
    # offloads in torch, so it is taken and the gradient is the same
    from uopkit.autograd import graph

    with pytest.raises(NotImplementedError, match="saves no tensors for backward"):
        graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    x = Tensor([1.0, 2.0], requires_grad=True)
    with graph.save_on_cpu(pin_memory=True), graph.disable_saved_tensors_hooks("no hooks"):
        (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_record_function_labels_a_range_as_torchs() -> None:
    # StyleGAN2-ADA's loss wraps each phase in torch.autograd.profiler.record_function (it was missing here): taken as
    # a context manager and a decorator, with the gradient through it torch's
    from uopkit.autograd import profiler

    def phase(lib, ag):
        x = _leaf(lib)
        with ag.profiler.record_function("Gmain_forward") as r:
            assert r is not None
            y = (x * x).sum()

        @ag.profiler.record_function("Gmain_backward")
        def back(t):
            t.backward()

        back(y)
        return x.grad.tolist()

    assert phase(Tensor, uopkit.autograd) == phase(torch, torch.autograd)
    with pytest.raises(TypeError):
        profiler.record_function(3)


# ---- in-place writes autograd doesn't record (under no_grad, through detach() or .data) into a tensor computed with
# gradients: the values change, the gradient through the tensor is still that of what computed it, taken at the
# values written (torch's history isn't changed by such a write)

X0 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def _leaf(lib, values=X0):
    a = np.array(values, np.float32)
    return torch.tensor(a, requires_grad=True) if lib is torch else Tensor(a, requires_grad=True)


def _off(lib, switch):
    if switch == "no_grad":
        return lib.no_grad()
    if switch == "set_grad_enabled":
        return lib.set_grad_enabled(False)
    return lib.inference_mode()


_UNRECORDED_WRITES = {
    "slice_mul_": lambda y, x: y[:, 1:].mul_(2.0),
    "mul_": lambda y, x: y.mul_(2.0),
    "copy_of_x": lambda y, x: y.copy_(x * 3.0),
    "setitem_ellipsis": lambda y, x: y.__setitem__(Ellipsis, x * x),
    "setitem_number": lambda y, x: y.__setitem__((1, 0), 10.0),
    "zero_": lambda y, x: y.zero_(),
    "clamp_": lambda y, x: y.clamp_(1.5, 4.5),
    "add_x": lambda y, x: y.add_(x),
    "transposed_row": lambda y, x: y.T[1].mul_(5.0),
    "several": lambda y, x: (y.mul_(2.0), y.__setitem__((0, 0), -1.0), y[1, 2:].add_(x[1, 2:])),
}


def _written_then_backward(lib, write, how, realized):
    x = _leaf(lib)
    y = x * 1.0
    if realized and lib is not torch:
        y.realize()
    if how == "detach":
        write(y.detach(), x)
    elif how == "data":
        write(y.data, x)
    else:
        with _off(lib, how):
            write(y, x)
    (y * y * x).sum().backward()
    return y.detach().numpy().tolist(), x.grad.numpy().tolist()


@pytest.mark.parametrize("realized", [False, True], ids=["lazy", "realized"])
@pytest.mark.parametrize("write", sorted(_UNRECORDED_WRITES))
def test_a_write_under_no_grad_keeps_the_gradient_of_what_computed_the_tensor(write, realized):
    # `y = x * 1; with no_grad(): y[1:].mul_(2)`: torch's x.grad is 2 * y (the written y) times x * 1's derivative;
    # the gradient was cut (backward raised) or lost the written positions
    expected = _written_then_backward(torch, _UNRECORDED_WRITES[write], "no_grad", realized)
    assert _written_then_backward(uopkit, _UNRECORDED_WRITES[write], "no_grad", realized) == expected


@pytest.mark.parametrize("realized", [False, True], ids=["lazy", "realized"])
@pytest.mark.parametrize("how", ["set_grad_enabled", "inference_mode", "detach", "data"])
@pytest.mark.parametrize("write", ["slice_mul_", "copy_of_x", "several"])
def test_every_unrecorded_write_keeps_the_gradient_of_what_computed_the_tensor(write, how, realized):
    # through detach() or .data the gradient read the values from before the write (x.grad was 2 * x * 1, silently)
    expected = _written_then_backward(torch, _UNRECORDED_WRITES[write], how, realized)
    assert _written_then_backward(uopkit, _UNRECORDED_WRITES[write], how, realized) == expected


def _bfloat16_written_then_backward(lib, write, recorded, realized):
    x = _leaf(lib)
    y = (x.to(torch.bfloat16) if lib is torch else x.bfloat16()) * 1.0
    if realized and lib is not torch:
        y.realize()
    if recorded:
        write(y, x)
    else:
        with lib.no_grad():
            write(y, x)
    (y * y).sum().backward()
    return y.detach().float().numpy().tolist(), x.grad.numpy().tolist()


@pytest.mark.parametrize("realized", [False, True], ids=["lazy", "realized"])
@pytest.mark.parametrize("recorded", [False, True], ids=["no_grad", "recorded"])
@pytest.mark.parametrize(
    "write", ["add_x", "clamp_", "copy_of_x", "mul_", "setitem_number", "slice_mul_", "transposed_row"]
)
def test_writes_into_bfloat16_values_keep_the_gradient_as_torchs(write, recorded, realized):
    # a bfloat16 value is differentiated through its uint16 bits: the write's graph was kept for the value only, not
    # for its bits (backward raised 'no tensor with requires_grad'); realized under no_grad, a lazy bfloat16 value
    # lost the graph that computed it; a recorded write into a realized one gave the written positions no gradient
    expected = _bfloat16_written_then_backward(torch, _UNRECORDED_WRITES[write], recorded, realized)
    assert _bfloat16_written_then_backward(uopkit, _UNRECORDED_WRITES[write], recorded, realized) == expected


# writes that take no part above: whole rows, a column, a slice from the value itself, a fill
_MORE_WRITES = {
    "setitem_slice": lambda y, x: y.__setitem__(slice(1, None), x[:1] * 2.0),
    "setitem_rows": lambda y, x: y.__setitem__((slice(1, None), slice(None)), x[:1] * 2.0),
    "setitem_column": lambda y, x: y.__setitem__((slice(None), 1), x[:, 0] * 4.0),
    "setitem_from_y": lambda y, x: y.__setitem__(slice(1, None), y[:1] * 2.0),
    "fill_": lambda y, x: y.fill_(2.0),
}
_EVERY_WRITE = {**_UNRECORDED_WRITES, **_MORE_WRITES}
_DTYPES = {"float32": (torch.float32, dtypes.float32), "float16": (torch.float16, dtypes.float16)}
_DTYPES["bfloat16"] = (torch.bfloat16, dtypes.bfloat16)


def _written_in_dtype_then_backward(lib, dtype, write, how, realized):
    x = _leaf(lib)
    theirs, ours = _DTYPES[dtype]
    y = (x.to(theirs) if lib is torch else x.cast(ours)) * 1.0
    if realized and lib is not torch:
        y.realize()
    if how == "detach":
        write(y.detach(), x)
    elif how == "no_grad":
        with lib.no_grad():
            write(y, x)
    else:
        write(y, x)
    # ((y * y * x) in a half dtype would cast x twice: one node here, whose gradient is rounded once, two in torch)
    (y * y).sum().backward()
    return y.detach().float().numpy().tolist(), x.grad.numpy().tolist()


@pytest.mark.parametrize("realized", [False, True], ids=["lazy", "realized"])
@pytest.mark.parametrize("how", ["no_grad", "recorded", "detach"])
@pytest.mark.parametrize("write", sorted(_EVERY_WRITE))
@pytest.mark.parametrize("dtype", sorted(_DTYPES))
def test_every_write_keeps_torchs_gradient_in_every_float_dtype(dtype, write, how, realized):
    # bfloat16 only: `y[...] = v` under no_grad or through y.detach() raised 'DETACH is not backed by a buffer' (a
    # realized bfloat16 value built into a tensor under no_grad was detached: the write went through a detach); a
    # write through a view of y.detach() lost y's gradient (the view, a BITCAST of a view of the bits, wasn't followed
    # to the value's history); a second write into a lazy y lost it (y, realized from a CONTIGUOUS, wasn't remembered
    # as what computed it, and its views stayed lazy copies the write missed). Every dtype: `y.zero_()` and `y.fill_(2)`
    # recorded made y a constant (backward raised 'no tensor with requires_grad'; torch's x.grad is zeros)
    expected = _written_in_dtype_then_backward(torch, dtype, _EVERY_WRITE[write], how, realized)
    assert _written_in_dtype_then_backward(uopkit, dtype, _EVERY_WRITE[write], how, realized) == expected


def test_a_recorded_write_that_reads_nothing_of_the_old_value_keeps_its_history():
    # torch: y is still a graph node (ZeroBackward, FillBackward, CopyBackwards, NormalBackward), requires_grad, and the
    # gradient of what computed it is zero, not None (an optimizer's weight decay and momentum act on it)
    writes = {
        "zero_": lambda y: y.zero_(),
        "fill_": lambda y: y.fill_(2.0),
        "copy_": lambda y: y.copy_(y.detach() * 0 + 3.0),
        "normal_": lambda y: y.normal_(),
    }
    for name, write in writes.items():
        seen = []
        for lib in (uopkit, torch):
            x, w = _leaf(lib, [1.0, 2.0]), _leaf(lib, [3.0, 4.0])
            y = x * 1.0
            write(y)
            ((y * 0.0).sum() + (w * w).sum()).backward()
            seen.append((name, y.requires_grad, y.is_leaf, x.grad.numpy().tolist(), w.grad.numpy().tolist()))
        assert seen[0] == seen[1]


def test_a_bfloat16_value_realized_under_no_grad_keeps_its_gradient():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.bfloat16() * 3.0
    view = y[1:]
    with no_grad():
        y.realize()
    (y * view.sum()).sum().backward()
    xt = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    yt = xt.to(torch.bfloat16) * 3.0
    (yt * yt[1:].sum()).sum().backward()
    assert x.grad.numpy().tolist() == xt.grad.numpy().tolist()


def test_a_bfloat16_value_written_into_plain_storage_carries_its_gradient():
    def written(lib):
        z = _leaf(lib, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).detach()
        z = z.to(torch.bfloat16) if lib is torch else z.bfloat16()
        w = _leaf(lib, [0.5, 1.5, 2.5])
        z[:, 0] = (w.to(torch.bfloat16) if lib is torch else w.bfloat16()) * 3.0
        (z * z).sum().backward()
        return w.grad.numpy().tolist()

    assert written(uopkit) == written(torch)


def _recorded_and_unrecorded(lib, unrecorded_first):
    x = _leaf(lib, [1.0, 2.0, 3.0])
    y = x * 1.0
    if unrecorded_first:
        with lib.no_grad():
            y[1:].mul_(2.0)
        y[:2].mul_(x[:2])
    else:
        y[:2].mul_(x[:2])
        with lib.no_grad():
            y[1:].mul_(2.0)
    (y * y).sum().backward()
    return y.detach().numpy().tolist(), x.grad.numpy().tolist()


@pytest.mark.parametrize("unrecorded_first", [True, False], ids=["no_grad_then_recorded", "recorded_then_no_grad"])
def test_recorded_and_unrecorded_writes_in_turn(unrecorded_first):
    assert _recorded_and_unrecorded(uopkit, unrecorded_first) == _recorded_and_unrecorded(torch, unrecorded_first)


@pytest.mark.parametrize(
    "step",
    [
        lambda w: w.sub_(0.1 * w.grad),
        lambda w: w.copy_(w.grad * 2.0),
        lambda w: w.zero_(),
        lambda w: w.mul_(0.9).add_(w.grad),
        lambda w: w[1:].mul_(2.0),
    ],
    ids=["sgd", "copy_", "zero_", "mul_add_", "slice"],
)
def test_optimizer_writes_into_leaves_under_no_grad_as_torchs(step):
    # a leaf that requires grad takes the write as an update: the next backward differentiates the new values
    def run(lib):
        w = _leaf(lib, [1.0, 2.0, 3.0])
        (w * w).sum().backward()
        with lib.no_grad():
            step(w)
        w.grad = None
        (w * w * w).sum().backward()
        return w.detach().numpy().tolist(), w.grad.numpy().tolist()

    np.testing.assert_allclose(run(uopkit)[1], run(torch)[1], rtol=1e-6)
    np.testing.assert_allclose(run(uopkit)[0], run(torch)[0], rtol=1e-6)


def test_the_switches_by_their_torch_names_on_tensor():
    # a sampler ported by renaming `torch.` to `Tensor.`: the leapfrog's gradient under `torch.enable_grad()` inside a
    # `torch.no_grad()` sampling loop, as torch's
    def leapfrog_gradient(lib):
        with lib.no_grad():
            x = lib.tensor([1.0, 2.0])
            with lib.enable_grad():
                x = x.detach().requires_grad_()
                (g,) = lib.autograd.grad((x**3).sum(), x)
            moved = x + 0.1 * g
            with lib.set_grad_enabled(True):
                enabled = lib.is_grad_enabled()
            with lib.inference_mode():
                inference = lib.is_inference_mode_enabled()
        return g.tolist(), moved.requires_grad, enabled, inference

    assert leapfrog_gradient(Tensor) == leapfrog_gradient(torch)
    assert Tensor.enable_grad is enable_grad and Tensor.Generator is uopkit.Generator and Tensor.vmap is uopkit.vmap
    assert Tensor.autocast is uopkit.autocast
