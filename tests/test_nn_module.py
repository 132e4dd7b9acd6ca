"""nn.Module, Parameter and the containers against torch.nn's: names and order of parameters, buffers and modules,
state dicts both ways, training mode, hooks, moving and casting, and a training loop step for step."""

import inspect
from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor, dtypes, nn
from uopkit.jit import TinyJit
from uopkit.nn.optim import SGD
from uopkit.nn.state import get_state_dict
from uopkit.tensor import ShapeError

torch = pytest.importorskip("torch")


def _nets():
    class Ours(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 8)
            self.bn = nn.BatchNorm1d(8)
            self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
            self.heads = nn.ModuleDict({"a": nn.Linear(8, 3), "b": nn.Linear(8, 3)})
            self.scale = nn.Parameter(Tensor.ones(3))
            self.extra = nn.ParameterList([nn.Parameter(Tensor.zeros(2)), Tensor.ones(2)])
            self.register_buffer("offset", Tensor.full((3,), 0.5))
            self.register_buffer("scratch", Tensor.zeros(3), persistent=False)
            self.plain = Tensor.ones(5)  # not state, as in torch
            self.drop = nn.Dropout(0.0)

        def forward(self, x):
            x = self.bn(self.fc(x)).relu()
            for block in self.blocks:
                x = self.drop(block(x)).relu()
            return (self.heads["a"](x) + self.heads["b"](x)) * self.scale + self.offset

    class Theirs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 8)
            self.bn = torch.nn.BatchNorm1d(8)
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)])
            self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(8, 3), "b": torch.nn.Linear(8, 3)})
            self.scale = torch.nn.Parameter(torch.ones(3))
            self.extra = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(2)), torch.ones(2)])
            self.register_buffer("offset", torch.full((3,), 0.5))
            self.register_buffer("scratch", torch.zeros(3), persistent=False)
            self.plain = torch.ones(5)
            self.drop = torch.nn.Dropout(0.0)

        def forward(self, x):
            x = self.bn(self.fc(x)).relu()
            for block in self.blocks:
                x = self.drop(block(x)).relu()
            return (self.heads["a"](x) + self.heads["b"](x)) * self.scale + self.offset

    torch.manual_seed(0)
    ours, theirs = Ours(), Theirs()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_names_and_order_match_torch():
    ours, theirs = _nets()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    own = [n for n, _ in theirs.named_parameters(recurse=False)]
    assert [n for n, _ in ours.named_parameters(recurse=False)] == own == ["scale"]
    assert sorted(get_state_dict(ours)) == sorted(theirs.state_dict())
    assert ours.get_submodule("blocks.1") is ours.blocks[1]
    assert ours.get_parameter("heads.a.bias") is ours.heads["a"].bias
    assert ours.get_buffer("bn.running_var") is ours.bn.running_var
    assert isinstance(ours.extra[1], nn.Parameter) and ours.extra[1].requires_grad


def test_forward_train_and_eval_match_torch():
    ours, theirs = _nets()
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    assert ours.training is True and all(m.training for m in ours.modules())
    # training mode by default (torch's): batch statistics, running statistics updated
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.bn.running_mean.numpy(), theirs.bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    assert ours.eval() is ours and not ours.training and not ours.bn.training
    theirs.eval()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert Tensor.training is False  # the module's mode applies while it runs only


def test_dropout_follows_the_module_mode():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(x)

    net, x = Net(), Tensor.ones(1000)
    assert (net(x).numpy() == 0).any()  # a new module trains, as torch's
    net.eval()
    assert (net(x).numpy() == 1).all()
    net.drop.train()  # a layer's own mode wins inside its parent's
    assert (net(x).numpy() == 0).any()


def test_a_lone_layer_follows_its_own_mode_not_the_global_flag():
    # torch: a module is in training mode from construction until eval(); a built-in layer made and called on its own
    # is too (it used to follow the global Tensor.training, False by default, and passed its input through)
    x = np.ones(1000, np.float32)
    for ours, theirs in ((nn.Dropout(0.5), torch.nn.Dropout(0.5)), (nn.AlphaDropout(0.5), torch.nn.AlphaDropout(0.5))):
        assert ours.training is theirs.training is True
        assert Tensor.training is False
        assert ((ours(Tensor(x)).numpy() == 1).all()) == bool((theirs(torch.tensor(x)) == 1).all()) is False
        ours.eval(), theirs.eval()
        with Tensor.train():  # the global flag doesn't reach a layer's own mode
            np.testing.assert_array_equal(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).numpy())
    # BatchNorm: batch statistics and a running update in training mode, running statistics after eval()
    xb = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    ours, theirs = nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4)
    assert ours.training is theirs.training is True
    out, expected = ours(Tensor(xb)).numpy(), theirs(torch.tensor(xb)).detach().numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    ours.eval(), theirs.eval()
    with Tensor.train():
        out = ours(Tensor(xb)).numpy()
    np.testing.assert_allclose(out, theirs(torch.tensor(xb)).detach().numpy(), rtol=1e-5, atol=1e-5)
    # Tensor.dropout outside any module still follows the global flag (tinygrad's way)
    assert (Tensor(x).dropout(0.5).numpy() == 1).all()
    with Tensor.train():
        assert (Tensor(x).dropout(0.5).numpy() == 0).any()


def test_a_subclass_of_a_mode_free_layer_runs_in_its_own_mode():
    # a lone Linear runs without setting the global flag (its forward reads no mode: _MODE_FREE_FORWARDS), but a
    # subclass whose forward drops out reads the mode, and trains from construction, as torch's
    class Dropped(nn.Linear):
        def forward(self, x):
            return super().forward(x).dropout(0.5)

    layer = Dropped(4, 500)
    assert Tensor.training is False
    assert (layer(Tensor.ones(2, 4)).numpy() == 0).any()
    layer.eval()
    assert not (layer(Tensor.ones(2, 4)).numpy() == 0).any()
    plain = nn.Linear(4, 3)
    np.testing.assert_array_equal(plain(Tensor.ones(1, 4)).numpy(), plain.eval()(Tensor.ones(1, 4)).numpy())


def test_jit_captures_anew_after_eval():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)

        def forward(self, x):
            return self.bn(x)

    net = Net()
    step = TinyJit(lambda x: net(x).realize())
    x = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3)).realize()
    for _ in range(3):
        trained = step(x).numpy()
    net.eval()
    for _ in range(3):
        evaluated = step(x).numpy()
    expected = (x.numpy() - net.bn.running_mean.numpy()) / np.sqrt(net.bn.running_var.numpy() + 1e-5)
    np.testing.assert_allclose(evaluated, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(trained, evaluated)


def test_training_loop_matches_torch():
    ours, theirs = _nets()
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)
    opt = SGD(ours.parameters(), lr=0.05, momentum=0.9)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    for _ in range(4):
        opt.zero_grad()
        loss = ((ours(Tensor(x)) - Tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss = ((theirs(torch.tensor(x)) - torch.tensor(y)) ** 2).mean()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-4)
    for (name, p), (_, tp) in zip(ours.state_dict().items(), theirs.state_dict().items(), strict=True):
        np.testing.assert_allclose(p.numpy(), tp.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_state_dict_round_trips_to_torch():
    ours, theirs = _nets()
    for p in ours.parameters():
        p.assign(p * 2 + 1).realize()
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    for k, v in theirs.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), ours.state_dict()[k].numpy())


def test_load_state_dict_keys():
    ours, _ = _nets()
    sd = {k: v.numpy() for k, v in ours.state_dict().items()}
    with pytest.raises(RuntimeError, match="missing keys.*fc.weight"):
        ours.load_state_dict({k: v for k, v in sd.items() if k != "fc.weight"})
    result = ours.load_state_dict({**sd, "nope": np.zeros(1)}, strict=False)
    assert result.missing_keys == [] and result.unexpected_keys == ["nope"]
    with pytest.raises(ValueError, match="fc.bias"):
        ours.load_state_dict({**sd, "fc.bias": np.zeros(3)})


def test_load_state_dict_result_prints_as_torch():
    ours, theirs = _nets()
    sd = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    got, want = ours.load_state_dict(sd), theirs.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    assert repr(got) == repr(want) == "<All keys matched successfully>"
    got = ours.load_state_dict({**sd, "nope": np.zeros(1)}, strict=False)
    want = theirs.load_state_dict(
        {**{k: torch.from_numpy(v) for k, v in sd.items()}, "nope": torch.zeros(1)}, strict=False
    )
    assert repr(got) == repr(want) and got == want


def test_hooks():
    lin = nn.Linear(2, 2)
    calls = []
    pre = lin.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    post = lin.register_forward_hook(lambda m, args, out: calls.append(out.shape) or out + 1)
    out = lin(Tensor.ones(3, 2))
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(lin.bias.numpy() + 1, (3, 2)), rtol=1e-6)
    assert calls == [(3, 2)]
    pre.remove()
    post.remove()
    np.testing.assert_allclose(lin(Tensor.zeros(1, 2)).numpy()[0], lin.bias.numpy(), rtol=1e-6)
    assert calls == [(3, 2)]
    with pytest.raises(TypeError, match="callable"):
        lin.register_forward_hook(3)


def test_parameter():
    data = Tensor([1.0, 2.0]).realize()
    p = nn.Parameter(data)
    assert isinstance(p, Tensor) and p.requires_grad and p.is_leaf
    assert type(p * 2) is Tensor
    (p * 3).sum().backward()
    assert p.grad.tolist() == [3.0, 3.0]
    assert nn.Parameter(data, requires_grad=False).requires_grad is False
    assert nn.Parameter().shape == (0,)
    with pytest.raises(TypeError, match="Parameter"):
        nn.Parameter(np.ones(2))
    with pytest.raises(RuntimeError, match="float"):
        nn.Parameter(Tensor([1, 2]))


def test_containers():
    layers = nn.ModuleList([nn.Linear(1, 1) for _ in range(3)])
    first, last = layers[0], layers[-1]
    layers.insert(1, nn.ReLU())
    assert len(layers) == 4 and isinstance(layers[1], nn.ReLU) and layers[3] is last
    del layers[1]
    assert [type(m).__name__ for m in layers] == ["Linear"] * 3 and layers[0] is first
    assert isinstance(layers[1:], nn.ModuleList) and len(layers[1:]) == 2
    layers += [nn.Tanh()]
    assert [n for n, _ in layers.named_parameters()] == [f"{i}.{w}" for i in range(3) for w in ("weight", "bias")]
    with pytest.raises(TypeError, match="Module"):
        layers.append(Tensor.relu)
    with pytest.raises(IndexError):
        layers[7]
    d = nn.ModuleDict({"x": nn.Linear(1, 2)})
    d["y"] = nn.Linear(2, 1)
    assert list(d) == ["x", "y"] and "y" in d and d.pop("x").out_features == 2 and d.keys() == ["y"]
    with pytest.raises(KeyError):
        d["training"] = nn.ReLU()
    with pytest.raises(KeyError):
        d["zz"]
    params = nn.ParameterDict({"a": Tensor.ones(2)})
    assert isinstance(params["a"], nn.Parameter) and [n for n, _ in params.named_parameters()] == ["a"]
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seq.eval()
    assert len(seq) == 2 and [type(m).__name__ for m in seq] == ["Linear", "ReLU"]
    with pytest.raises(ValueError, match="train"):
        nn.Sequential({"train": nn.ReLU()})


def test_module_without_forward_and_bad_arguments():
    class Empty(nn.Module):
        pass

    with pytest.raises(NotImplementedError, match="Empty.*forward"):
        Empty()(Tensor.ones(1))
    with pytest.raises(KeyError, match="'.'"):
        Empty().register_buffer("a.b", Tensor.ones(1))
    with pytest.raises(TypeError, match="Parameter"):
        Empty().register_parameter("w", Tensor.ones(1))
    with pytest.raises(ValueError, match="bool"):
        Empty().train("yes")
    with pytest.raises(TypeError, match="floating"):
        nn.Linear(1, 1).to("int32")


def test_apply_zero_grad_casting_and_repr():
    ours, theirs = _nets()
    seen = []
    ours.apply(lambda m: seen.append(type(m).__name__) if isinstance(m, nn.Linear) else None)
    assert len(seen) == 5
    ours(Tensor.ones(2, 4)).sum().backward()
    assert ours.fc.weight.grad is not None
    ours.zero_grad()
    assert all(p.grad is None for p in ours.parameters())
    ours.requires_grad_(False)
    assert not any(p.requires_grad for p in ours.parameters())
    ours.requires_grad_(True)
    ours.double()
    assert ours.fc.weight.dtype.name == "double" and ours.bn.num_batches_tracked.dtype.name == "long"
    assert isinstance(ours.scale, nn.Parameter) and ours.scale.requires_grad
    np.testing.assert_allclose(ours.fc.weight.numpy(), theirs.fc.weight.detach().numpy(), rtol=1e-6)
    assert ours.eval()(Tensor.ones(2, 4, dtype="float64")).dtype.name == "double"
    text = repr(ours)
    assert "(fc): Linear(" in text and "(blocks): ModuleList(" in text and "in_features=4" in text


def test_sequential_repr_shows_each_layer_as_torch():
    # a model printed at the start of a training program: nested blocks show their layers' settings, as torch's
    ours = nn.Sequential(nn.Flatten(), nn.Sequential(nn.Dropout(0.25), nn.Unflatten(1, (2, 3))), nn.Identity())
    theirs = torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Sequential(torch.nn.Dropout(0.25), torch.nn.Unflatten(1, (2, 3))),
        torch.nn.Identity(),
    )
    assert repr(ours) == repr(theirs)
    # a plain function (tinygrad style) by its name
    assert repr(nn.Sequential(Tensor.relu)) == "Sequential(\n  (0): relu\n)"


def test_conversions_keep_tied_weights_tied():
    # nanoGPT ties its embedding to its output layer, then calls model.to(...): one parameter still, as torch's
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
            self.emb.weight = self.head.weight

        def forward(self, idx):
            return self.head(self.emb(idx))

    for convert in (lambda m: m.half(), lambda m: m.double(), lambda m: m.to("CPU:1"), lambda m: m.bfloat16()):
        m = convert(Tied())
        assert m.emb.weight is m.head.weight and len(list(m.parameters())) == 1
    m = Tied().double()
    m(Tensor([[1, 2, 3]])).sum().backward()
    # the gradient of both uses in one tensor: the embedding's rows plus the output layer's
    x = np.asarray(m.head.weight.numpy())
    want = np.zeros_like(x)
    want[[1, 2, 3]] += x.sum(0)
    want += x[[1, 2, 3]].sum(0)
    np.testing.assert_allclose(m.head.weight.grad.numpy(), want, rtol=1e-12)


def test_a_bare_sequential_trains_from_construction():
    # torch's Sequential is made in training mode: batch statistics, running stats updated, until eval()
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    ours, theirs = (
        nn.Sequential(nn.BatchNorm1d(3), nn.ReLU()),
        torch.nn.Sequential(torch.nn.BatchNorm1d(3), torch.nn.ReLU()),
    )
    assert ours.training is True and ours[0].training is True
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(ours[0].running_mean.numpy(), theirs[0].running_mean.numpy(), rtol=1e-6)
    ours.eval(), theirs.eval()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-5)


def test_a_frozen_weight_stays_a_parameter():
    # requires_grad_(False) freezes a layer's weight; it is still one of its parameters (an EMA copy's update loops
    # over them; unfreezing a backbone loops over them), as torch's Parameters stay parameters
    import copy

    import uopkit

    for convert in (lambda m: m, lambda m: m.double()):
        model = nn.Linear(2, 2)
        ema = convert(copy.deepcopy(model))
        ema.requires_grad_(False)
        assert len(list(ema.parameters())) == 2 and all(p.requires_grad is False for p in ema.parameters())
        assert not list(ema.buffers()) and set(ema.state_dict()) == {"weight", "bias"}
        with uopkit.no_grad():
            for e, p in zip(ema.parameters(), model.parameters(), strict=True):
                e.mul_(0.5).add_(p.detach().cast(e.dtype), alpha=0.5)
        np.testing.assert_allclose(ema.weight.numpy(), model.weight.numpy(), rtol=1e-6)
        ema.requires_grad_(True)
        ema(Tensor([[1.0, 1.0]], dtype=ema.weight.dtype)).sum().backward()
        assert ema.weight.grad is not None and ema.weight.grad.numpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]
    # the built-in layers' running statistics never wanted a gradient: still buffers
    bn = nn.BatchNorm1d(3)
    bn.requires_grad_(False)
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    assert {n for n, _ in bn.named_buffers()} >= {"running_mean", "running_var"}


def test_zero_grad_without_set_to_none_zeroes_in_place():
    # as torch's: the same `.grad` object, zeroed, then accumulated into
    layer = nn.Linear(2, 1)
    layer(Tensor([[1.0, 2.0]])).sum().backward()
    held = layer.weight.grad
    layer.zero_grad(set_to_none=False)
    assert layer.weight.grad is held and held.tolist() == [[0.0, 0.0]]
    layer(Tensor([[3.0, 4.0]])).sum().backward()
    assert layer.weight.grad is held and held.tolist() == [[3.0, 4.0]]


def test_a_computed_buffer_is_stored_at_registration() -> None:
    # a RoPE table computed in __init__ stayed a lazy graph: every forward recomputed it, and its slice at a decode
    # position compiled a kernel per position; torch stores a buffer's values (constants stay lazy: nothing to run)
    from uopkit.engine.realize import stats
    from uopkit.uop.ops import Ops

    class Rope(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            freqs = Tensor.arange(16).float().reshape(16, 1) * Tensor([1.0, 0.1, 0.01, 0.001]).reshape(1, 4)
            self.register_buffer("cos", freqs.cos(), persistent=False)
            self.register_buffer("count", Tensor.zeros(4))

    m = Rope()
    assert m.cos.uop.base.op is Ops.BUFFER and m.count.uop.base.op is Ops.CONST
    want = np.cos(np.arange(16, dtype=np.float32)[:, None] * np.array([1.0, 0.1, 0.01, 0.001], np.float32))
    x = Tensor.ones(1, 4).realize()
    (x * m.cos[0:1]).numpy()
    before = stats["kernels_compiled"]
    for pos in range(1, 8):
        np.testing.assert_allclose((x * m.cos[pos : pos + 1]).numpy(), want[pos : pos + 1], rtol=1e-6, atol=1e-7)
    assert stats["kernels_compiled"] - before <= 1


def test_a_distribution_held_by_a_module_is_not_its_state() -> None:
    # a flow's base distribution or a VAE's prior: torch's state_dict has only the layers' tensors, so torch's loads
    from uopkit import distributions

    class Flow(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.base = distributions.MultivariateNormal(Tensor.zeros(2), Tensor.eye(2))

    flow = Flow()
    assert list(flow.state_dict()) == ["lin.weight", "lin.bias"] and len(list(flow.parameters())) == 2
    flow.load_state_dict({"lin.weight": Tensor.ones(2, 2), "lin.bias": Tensor.zeros(2)})
    assert flow.lin.weight.numpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_a_subclass_of_a_layer_that_overrides_forward_runs_its_forward():
    # torch calls forward: a masked convolution (PixelCNN's) or a Linear subclass changes what the layer computes
    class Masked(nn.Conv2d):
        def forward(self, x):
            return self._conv_forward(x, self.weight * 0, self.bias)

    class Shifted(nn.Linear):
        def forward(self, x):
            return super().forward(x) + 100

    conv = Masked(1, 2, 3, padding=1)
    want = np.broadcast_to(conv.bias.numpy()[:, None, None], (1, 2, 4, 4))
    np.testing.assert_allclose(conv(Tensor.ones(1, 1, 4, 4)).numpy(), want, rtol=1e-6)
    lin = Shifted(2, 3)
    want = np.ones((1, 2), np.float32) @ lin.weight.numpy().T + lin.bias.numpy() + 100
    np.testing.assert_allclose(lin(Tensor.ones(1, 2)).numpy(), want, rtol=1e-6)

    class Embedded(nn.Sequential):
        # guided-diffusion's TimestepEmbedSequential: a forward with more arguments than Sequential's
        def forward(self, x, emb):
            for layer in self:
                x = layer(x) + emb
            return x

    seq = Embedded(nn.Identity(), nn.Identity())
    assert seq(Tensor([1.0]), Tensor([2.0])).tolist() == [5.0]


def test_a_forward_set_on_the_instance_is_the_one_called():
    class M(nn.Module):
        def forward(self, x):
            return x + 1

    m, lin = M(), nn.Linear(1, 1)
    m.forward = lambda x: x * 100
    lin.forward = lambda x: x * 0 - 7
    assert m(Tensor([1.0])).tolist() == [100.0]
    assert lin(Tensor([[1.0]])).tolist() == [[-7.0]]


def test_hooks_run_once_per_call_of_a_built_in_layer():
    # BatchNorm1d checks the rank then calls BatchNorm's call; an unbatched convolution calls itself on a batch of one
    for m, x in [
        (nn.BatchNorm1d(3), Tensor.ones(2, 3)),
        (nn.Conv2d(2, 3, 3), Tensor.ones(2, 4, 4)),
        (nn.ConvTranspose2d(2, 3, 3), Tensor.ones(1, 2, 4, 4)),
    ]:
        calls: list[str] = []
        m.register_forward_pre_hook(lambda *a, calls=calls: calls.append("pre"))
        m.register_forward_hook(lambda *a, calls=calls: calls.append("post"))
        m(x)
        assert calls == ["pre", "post"], type(m).__name__


def test_layers_keep_torch_s_attributes():
    conv = nn.Conv2d(2, 4, 3, stride=2, padding=1)
    assert (conv.stride, conv.padding, conv.dilation, conv.transposed) == ((2, 2), (1, 1), (1, 1), False)
    assert nn.Conv1d(2, 4, 3, padding="same").padding == "same"
    convt = nn.ConvTranspose2d(4, 2, 4, 2, 1)
    assert (convt.output_padding, convt.padding_mode, convt.transposed) == ((0, 0), "zeros", True)
    assert nn.GroupNorm(2, 4).affine and nn.LayerNorm(4).elementwise_affine and not nn.InstanceNorm2d(4).affine
    assert not isinstance(nn.BatchNorm1d(4), nn.BatchNorm2d)
    # torch's order: momentum before affine
    bn = nn.BatchNorm2d(4, 1e-3, 0.5)
    assert (bn.eps, bn.momentum, bn.affine) == (1e-3, 0.5, True)
    with pytest.raises(ShapeError, match="4-d"):
        nn.BatchNorm2d(4)(Tensor.ones(2, 4))


def test_conv_transpose_output_size_picks_the_output_padding():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((1, 4, 7, 7)).astype(np.float32)
    ref = torch.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1)
    ours = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1)
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    for size in [(13, 13), (14, 13), (1, 3, 14, 14)]:
        want = ref(torch.from_numpy(x), output_size=size).detach().numpy()
        np.testing.assert_allclose(ours(Tensor(x), output_size=size).numpy(), want, rtol=1e-5, atol=1e-6)
    assert ours.output_padding == (0, 0)
    with pytest.raises(ValueError, match=r"output_size \(15, 15\) can't be reached .* allows sizes 13 to 14"):
        ours(Tensor(x), output_size=(15, 15))


def test_global_module_forward_hooks_as_torchs():
    # torch.nn.modules.module.register_module_forward_pre_hook / register_module_forward_hook: every module's call
    # (built-in layers with no hooks of their own too, a BatchNorm1d once), before the module's own hooks, as torch's
    from torch.nn.modules import module as tmodule

    from uopkit.nn import module as umodule

    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)

    def run(lib, mod, make) -> list:
        class Net(lib.Module):
            def __init__(self):
                super().__init__()
                self.fc, self.bn, self.act = lib.Linear(3, 2), lib.BatchNorm1d(2), lib.ReLU()

            def forward(self, x):
                return self.act(self.bn(self.fc(x)))

        class Raises(lib.Module):
            def forward(self, x):
                raise ValueError("no")

        net, log = Net().eval(), []
        handles = [
            mod.register_module_forward_pre_hook(lambda m, args: log.append(("pre", type(m).__name__))),
            mod.register_module_forward_hook(lambda m, a, o: log.append(("post", type(m).__name__, tuple(o.shape)))),
            mod.register_module_forward_hook(lambda m, a, kw, o: log.append(("kw", sorted(kw))), with_kwargs=True),
        ]
        net.fc.register_forward_pre_hook(lambda m, args: log.append("own_pre"))
        net.fc.register_forward_hook(lambda m, args, out: log.append("own_post"))
        net(make(x))
        zeroed = mod.register_module_forward_hook(lambda m, args, out: out * 0 if m is net.act else None)
        log.append(net(make(x)).sum().tolist())
        for h in [*handles, zeroed]:
            h.remove()
        net(make(x))
        always = mod.register_module_forward_hook(lambda m, a, out: log.append(("always", out)), always_call=True)
        with pytest.raises(ValueError):
            Raises()(make(x))
        always.remove()
        return log

    ours = run(nn, umodule, Tensor)
    assert ours == run(torch.nn, tmodule, torch.tensor)
    assert ours.count(("pre", "BatchNorm1d")) == 2 and ours[-1] == ("always", None)


def test_hook_options_as_torchs():
    # with_kwargs, prepend and always_call (register_forward_hook) and with_kwargs, prepend (register_forward_pre_hook)
    # run the hooks torch runs, in torch's order, with what torch hands them
    class Scaled(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    class TScaled(torch.nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    def run(m, make) -> list:
        log: list = []
        m.register_forward_pre_hook(lambda m, args: log.append("pre"))
        m.register_forward_pre_hook(lambda m, args: log.append("pre_first"), prepend=True)
        m.register_forward_pre_hook(
            lambda m, args, kwargs: log.append(("pre_kw", sorted(kwargs))) or (args, {**kwargs, "scale": 3.0}),
            with_kwargs=True,
        )
        m.register_forward_hook(lambda m, args, out: log.append("post"))
        m.register_forward_hook(
            lambda m, args, kwargs, out: log.append(("post_kw", kwargs["scale"])) or out + 1, with_kwargs=True
        )
        first = m.register_forward_hook(lambda m, args, out: log.append("post_first"), prepend=True)
        m.register_forward_hook(lambda m, args, out: log.append(("always", out is None)), always_call=True)
        log.append(m(make(np.array([1.0, 2.0], np.float32)), scale=2.0).tolist())
        first.remove()
        with pytest.raises(TypeError):
            m(make(np.array([1.0], np.float32)), scale=2.0, bogus=1)
        return log

    ours, theirs = run(Scaled(), Tensor), run(TScaled(), torch.tensor)
    assert ours == theirs
    # (the always_call hook runs, with output None, when the forward raises)
    assert ours == ["pre_first", "pre", ("pre_kw", ["scale"]), "post_first", "post", ("post_kw", 3.0)] + [
        ("always", False),
        [4.0, 7.0],
        "pre_first",
        "pre",
        ("pre_kw", ["bogus", "scale"]),
        ("always", True),
    ]
    bad = nn.Linear(2, 2)
    bad.register_forward_pre_hook(lambda m, args, kwargs: args, with_kwargs=True)
    with pytest.raises(RuntimeError, match="new_kwargs"):
        bad(Tensor.ones(1, 2))


def test_named_parameters_and_buffers_without_removing_duplicates_as_torchs():
    shared, tshared = nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    ours = nn.Sequential(shared, nn.ReLU(), shared, nn.Linear(3, 3))
    ours.append(nn.Linear(3, 3))
    ours[4].weight = ours[3].weight
    theirs = torch.nn.Sequential(tshared, torch.nn.ReLU(), tshared, torch.nn.Linear(3, 3))
    theirs.append(torch.nn.Linear(3, 3))
    theirs[4].weight = theirs[3].weight
    for remove_duplicate in (True, False):
        for method in ("named_parameters", "named_buffers"):
            got = [n for n, _ in getattr(ours, method)(remove_duplicate=remove_duplicate)]
            want = [n for n, _ in getattr(theirs, method)(remove_duplicate=remove_duplicate)]
            assert got == want, (method, remove_duplicate)
        got = [n for n, _ in ours.named_modules(remove_duplicate=remove_duplicate)]
        assert got == [n for n, _ in theirs.named_modules(remove_duplicate=remove_duplicate)]
    assert ours.get_parameter("2.weight") is shared.weight


def _tcn_block(lib):
    # locuslab/TCN's TemporalBlock: each conv is an attribute and also inside `net`, so it has two names
    class Block(lib.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = lib.Conv1d(2, 2, 3)
            self.relu = lib.ReLU()
            self.conv2 = lib.Conv1d(2, 2, 3)
            self.net = lib.Sequential(self.conv1, self.relu, self.conv2)
            self.emb = lib.Embedding(4, 2)
            self.dec = lib.Linear(2, 4)
            # a tied weight: one tensor, two names
            self.dec.weight = self.emb.weight

    return Block()


def test_state_dict_lists_a_shared_layer_and_a_tied_weight_under_every_name_as_torchs():
    ours, theirs = _tcn_block(nn), _tcn_block(torch.nn)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert "net.0.weight" in ours.state_dict() and "dec.weight" in ours.state_dict()
    assert list(get_state_dict(ours)) == list(theirs.state_dict())
    for remove_duplicate in (True, False):
        for method in ("named_parameters", "named_modules"):
            got = [n for n, _ in getattr(ours, method)(remove_duplicate=remove_duplicate)]
            assert got == [n for n, _ in getattr(theirs, method)(remove_duplicate=remove_duplicate)], method
    assert len(list(ours.parameters())) == len(list(theirs.parameters()))
    assert len(list(ours.modules())) == len(list(theirs.modules()))
    # each name its own value: every tensor ends with the value of its last name, as torch's copies leave it
    rng = np.random.default_rng(0)
    given = {k: rng.standard_normal(tuple(v.shape)).astype(np.float32) for k, v in theirs.state_dict().items()}
    as_torch = {k: torch.tensor(v) for k, v in given.items()}
    assert tuple(ours.load_state_dict(given)) == tuple(theirs.load_state_dict(as_torch))
    for k, v in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[k].numpy(), v.numpy(), err_msg=k)
    np.testing.assert_array_equal(ours.conv1.weight.numpy(), given["net.0.weight"])
    # torch loads ours (strict), and a state dict with one name of each tensor misses the others, as torch's
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    once = {k: v for k, v in given.items() if not k.startswith(("net.", "dec.weight"))}
    got = ours.load_state_dict(once, strict=False)
    assert tuple(got) == tuple(theirs.load_state_dict({k: torch.tensor(v) for k, v in once.items()}, strict=False))
    assert got.missing_keys == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "dec.weight"]
    with pytest.raises(RuntimeError, match="missing keys"):
        ours.load_state_dict(once)


def test_get_state_dict_lists_a_shared_plain_object_under_every_path_and_ends_cycles():
    class Plain:
        def __init__(self, w):
            self.w = w

    shared = Plain(Tensor([1.0]))
    holder = Plain(shared)
    holder.again = shared
    holder.me = holder
    assert list(get_state_dict(holder)) == ["w.w", "again.w"]


def test_batchnorm_state_dict_without_num_batches_tracked_loads_as_torchs(tmp_path):
    # an older (or hand-built, converted) checkpoint has no num_batches_tracked: torch fills in the layer's own count
    # unless the state dict's `_metadata` says the layer's version is 2 or later (torch.save keeps it)
    from uopkit.nn.state import torch_load

    bn, tbn = nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
    with torch.no_grad():
        tbn.running_mean.copy_(torch.arange(4.0))
        tbn.num_batches_tracked.fill_(7)
    bn.num_batches_tracked.assign(Tensor(5, dtype=bn.num_batches_tracked.dtype)).realize()
    tbn2 = torch.nn.BatchNorm2d(4)
    tbn2.num_batches_tracked.fill_(5)
    sd = {k: v for k, v in tbn.state_dict().items() if k != "num_batches_tracked"}
    assert tuple(tbn2.load_state_dict(sd)) == tuple(bn.load_state_dict({k: v.numpy() for k, v in sd.items()}))
    assert bn.num_batches_tracked.item() == tbn2.num_batches_tracked.item() == 5
    np.testing.assert_array_equal(bn.running_mean.numpy(), [0.0, 1.0, 2.0, 3.0])
    model, tmodel = (
        nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4)),
        torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.BatchNorm1d(4)),
    )
    versioned = tmodel.state_dict()
    del versioned["1.num_batches_tracked"]
    torch.save(versioned, tmp_path / "bn.pt")
    with pytest.raises(RuntimeError, match="num_batches_tracked"):
        tmodel.load_state_dict(versioned)
    with pytest.raises(RuntimeError, match="num_batches_tracked"):
        model.load_state_dict(torch_load(tmp_path / "bn.pt"))
    assert model.load_state_dict(torch_load(tmp_path / "bn.pt"), strict=False).missing_keys == ["1.num_batches_tracked"]
    # (a plain dict has no versions: filled in)
    assert model.load_state_dict(dict(versioned)).missing_keys == []


# every layer in uopkit.nn, with arguments where its constructor needs some (a new layer with required arguments
# fails test_every_layer_works_as_a_submodule until it is added here)
_LAYER_ARGS = {
    "Threshold": (0.1, 0.0),
    "BatchNorm": (3,),
    "BatchNorm1d": (3,),
    "BatchNorm2d": (3,),
    "BatchNorm3d": (3,),
    "SyncBatchNorm": (3,),
    "ChannelShuffle": (2,),
    "LayerNorm2d": (3,),
    "LocalResponseNorm": (2,),
    "CrossMapLRN2d": (2,),
    "PixelShuffle": (2,),
    "PixelUnshuffle": (2,),
    "Unflatten": (1, (2, 2)),
    "AdaptiveLogSoftmaxWithLoss": (8, 10, [4]),
    "Embedding": (5, 3),
    "EmbeddingBag": (5, 3),
    "GRUCell": (4, 8),
    "LSTMCell": (4, 8),
    "RNNCell": (4, 8),
    "GRU": (4, 8),
    "LSTM": (4, 8),
    "RNN": (4, 8),
    "GroupNorm": (2, 4),
    "LayerNorm": (4,),
    "RMSNorm": (4,),
    "Linear": (4, 8),
    "Bilinear": (2, 3, 4),
    "MultiheadAttention": (8, 2),
    "TransformerEncoderLayer": (8, 2, 16),
    "TransformerDecoderLayer": (8, 2, 16),
    "Fold": ((4, 4), 2),
    "Unfold": (2,),
    "Upsample": (4,),
    "UpsamplingBilinear2d": (4,),
    "UpsamplingNearest2d": (4,),
    **{f"{kind}{d}d": (2, 3, 3) for kind in ("Conv", "ConvTranspose") for d in (1, 2, 3)},
    **{f"Lazy{kind}{d}d": (3, 3) for kind in ("Conv", "ConvTranspose") for d in (1, 2, 3)},
    "LazyLinear": (8,),
    **{f"InstanceNorm{d}": (3,) for d in ("", "1d", "2d", "3d")},
    **{f"{kind}{d}d": (2,) for kind in ("AdaptiveAvgPool", "AdaptiveMaxPool") for d in (1, 2, 3)},
    **{f"{kind}{d}d": (2,) for kind in ("AvgPool", "MaxPool", "MaxUnpool") for d in (1, 2, 3)},
    **{
        f"{kind}{d}d": (1,) for kind in ("CircularPad", "ReflectionPad", "ReplicationPad", "ZeroPad") for d in (1, 2, 3)
    },
    **{f"ConstantPad{d}d": (1, 0.5) for d in (1, 2, 3)},
    **{f"LPPool{d}d": (2, 2) for d in (1, 2, 3)},
    **{f"FractionalMaxPool{d}d": (2, 1) for d in (2, 3)},
}


def _layer(name):
    cls = getattr(nn, name)
    if name == "Transformer":
        return cls(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    if name in ("TransformerEncoder", "TransformerDecoder"):
        return cls(getattr(nn, name + "Layer")(8, 2, 16), 2)
    if name == "NLLLoss2d":
        # (a deprecated alias of NLLLoss, which warns when made)
        return nn.NLLLoss()
    return cls(*_LAYER_ARGS.get(name, ()))


def _module_classes():
    def below(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)

    return sorted({c for c in below(nn.Module) if c.__module__.startswith("uopkit.")}, key=lambda c: c.__qualname__)


_PUBLIC_LAYERS = sorted(
    n for n in nn.__all__ if isinstance(getattr(nn, n), type) and issubclass(getattr(nn, n), nn.Module)
)
# Module's methods a layer is meant to replace (its forward, its repr, what an old checkpoint lacks)
_OVERRIDABLE = {"__init__", "__call__", "forward", "extra_repr", "__repr__", "_fill_old_state"}


@pytest.mark.parametrize("cls", _module_classes(), ids=lambda c: c.__qualname__)
def test_no_layer_shadows_a_module_method_with_an_incompatible_one(cls):
    # Module's own machinery (`_state`, `train`, `modules`, ...) is called on every sub-module: a layer's helper of
    # the same name broke it (_RecurrentCell._state(x, h, what): a GRUCell couldn't be a sub-module or eval()'d)
    for name, value in vars(cls).items():
        base = inspect.getattr_static(nn.Module, name, None)
        if base is None or name in _OVERRIDABLE or name.startswith("__") and not callable(base):
            continue
        assert callable(value) == callable(base), f"{cls.__qualname__}.{name} replaces Module.{name}"
        if not inspect.isfunction(value) or not inspect.isfunction(base):
            continue
        ours, theirs = inspect.signature(value).parameters, inspect.signature(base).parameters
        required = [
            p for p in ours.values() if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        ours_sig, theirs_sig = inspect.signature(value), inspect.signature(base)
        assert len(required) <= len(theirs) and all(p.name in theirs for p in required), (
            f"{cls.__qualname__}.{name}{ours_sig} can't be called as Module.{name}{theirs_sig}"
        )


@pytest.mark.parametrize("name", _PUBLIC_LAYERS)
def test_every_layer_works_as_a_submodule(name):
    layer = _layer(name)
    own = set(vars(layer)) - {"_module_state"}
    shadowed = sorted(k for k in own if hasattr(nn.Module, k))
    assert not shadowed, f"{name}: attributes {shadowed} hide Module's"

    class Owner(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

    owner = Owner()
    assert layer.training is True
    owner.eval()
    assert layer.training is False and all(m.training is False for m in layer.modules())
    owner.train()
    assert layer.training is True
    assert layer.eval() is layer and layer.training is False
    seq = nn.Sequential(_layer(name))
    seq.train()
    assert seq[0].training is True
    sd = owner.state_dict()
    assert sorted(sd) == sorted("layer." + k for k in layer.state_dict())
    owner.load_state_dict(sd)
    assert {id(p) for p in owner.parameters()} == {id(p) for p in layer.parameters()}
    repr(owner)


def _outcome(fn):
    # the exception type a call raises, or None
    try:
        fn()
    except Exception as e:
        return type(e)
    return None


def test_assigning_to_a_parameter_buffer_or_submodule_name_follows_torchs_rules():
    def cases(lib, ones, tensor_type):
        class Net(lib.Module):
            def __init__(self):
                super().__init__()
                self.fc = lib.Linear(2, 3)
                self.bn = lib.BatchNorm1d(3)
                self.register_buffer("b", ones(2))

        def run(assign):
            net = Net()
            error = _outcome(lambda: assign(net))
            state = list(net.state_dict())
            return error, state

        return [
            # a parameter takes a Parameter or None; a tensor that doesn't require grad or a number is a TypeError (it
            # was dropped). (A plain tensor, requires_grad unset, is uopkit's departure, below)
            run(lambda n: setattr(n.fc, "weight", ones(3, 2, requires_grad=False))),
            run(lambda n: setattr(n.fc, "weight", 3)),
            run(lambda n: setattr(n.fc, "weight", n.fc.weight.detach().requires_grad_(False))),
            run(lambda n: setattr(n.fc, "weight", None)),
            run(lambda n: setattr(n.fc, "weight", lib.Parameter(ones(3, 2)))),
            # a buffer, registered or a layer's running statistics, takes a tensor (staying a buffer) or None
            run(lambda n: setattr(n.bn, "running_mean", ones(3))),
            run(lambda n: setattr(n.bn, "running_mean", 5)),
            run(lambda n: setattr(n, "b", ones(4))),
            run(lambda n: setattr(n, "b", "x")),
            run(lambda n: setattr(n.bn, "running_mean", lib.Parameter(ones(3)))),
            run(lambda n: setattr(n, "b", lib.Linear(1, 1))),
            # a sub-module takes a module or None
            run(lambda n: setattr(n, "fc", ones(2))),
            run(lambda n: setattr(n, "fc", lib.Parameter(ones(2)))),
            run(lambda n: setattr(n, "fc", None)),
            # a deleted one is a plain attribute again
            run(lambda n: (delattr(n, "b"), setattr(n, "b", 7), delattr(n.fc, "weight"), setattr(n.fc, "weight", 1))),
        ]

    ours = cases(nn, Tensor.ones, Tensor)
    theirs = cases(torch.nn, torch.ones, torch.Tensor)
    assert ours == theirs
    # uopkit's departure, kept: a tensor that requires grad is taken (tinygrad-style conversion of a layer)
    layer = nn.Linear(2, 3)
    layer.weight = layer.weight.cast("float16")
    assert layer.weight.dtype.name == "half"
    # and a plain tensor, as tinygrad programs load weights, takes the parameter's place as a parameter (torch raises)
    layer = nn.Linear(2, 3)
    w = Tensor.full((3, 2), 0.5)
    layer.weight = w
    assert layer.weight is w and w.requires_grad
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"] and "weight" in layer.state_dict()
    layer(Tensor.ones(1, 2)).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.ones((3, 2)))


def test_register_errors_as_torchs():
    def cases(lib, ones):
        class Net(lib.Module):
            def __init__(self):
                super().__init__()
                self.fc = lib.Linear(2, 3)
                self.register_buffer("b", ones(2))
                self.n = 5

        def param():
            return lib.Parameter(ones(1))

        calls = [
            lambda n: n.register_parameter("fc", param()),
            lambda n: n.register_parameter("b", param()),
            lambda n: n.register_parameter("training", param()),
            lambda n: n.register_parameter("n", param()),
            lambda n: n.register_parameter(3, param()),
            lambda n: n.register_parameter("p", ones(1)),
            lambda n: n.fc.register_parameter("weight", param()),
            lambda n: n.register_buffer("fc", ones(1)),
            lambda n: n.fc.register_buffer("weight", ones(1)),
            lambda n: n.register_buffer("b", ones(3)),
            lambda n: n.register_buffer(3, ones(1)),
            lambda n: n.register_buffer("x", 3),
            lambda n: n.add_module("b", lib.Linear(1, 1)),
            lambda n: n.add_module("fc", lib.Linear(1, 1)),
            lambda n: n.add_module("n", lib.Linear(1, 1)),
            lambda n: n.add_module(3, lib.Linear(1, 1)),
            lambda n: n.add_module("x", 3),
            lambda n: n.add_module("forward", lib.Linear(1, 1)),
        ]
        return [_outcome(lambda call=call: call(Net())) for call in calls]

    assert cases(nn, Tensor.ones) == cases(torch.nn, torch.ones)


def test_global_module_backward_hooks_as_torchs():
    # torch.nn.modules.module.register_module_full_backward_pre_hook / register_module_full_backward_hook: every
    # module's call, before the module's own hooks; a hook's return replaces grad_input; a removed one no longer runs
    from torch.nn.modules import module as tmodule

    from uopkit.nn import module as umodule

    def run(lib, mod, make) -> list:
        class Net(lib.Module):
            def __init__(self):
                super().__init__()
                self.fc, self.act = lib.Linear(3, 2), lib.Tanh()
                self.fc.weight = lib.Parameter(make(np.array([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]], np.float32)))
                self.fc.bias = lib.Parameter(make(np.array([0.2, -0.1], np.float32)))

            def forward(self, x):
                return self.act(self.fc(x))

        def r(t):
            return None if t is None else np.round(t.detach().numpy(), 5).tolist()

        net, log = Net(), []
        handles = [
            mod.register_module_full_backward_pre_hook(lambda m, go: log.append(("pre", type(m).__name__, r(go[0])))),
            mod.register_module_full_backward_hook(lambda m, gi, go: log.append(("hook", type(m).__name__, r(gi[0])))),
            mod.register_module_full_backward_hook(lambda m, gi, go: (gi[0] * 2,) if isinstance(m, lib.Tanh) else None),
        ]
        net.fc.register_full_backward_hook(lambda m, gi, go: log.append(("own", r(gi[0]))))
        x = make(np.arange(6, dtype=np.float32).reshape(2, 3) / 10).requires_grad_(True)
        net(x).sum().backward()
        log += [r(x.grad), r(net.fc.weight.grad)]
        for h in handles:
            h.remove()
        x.grad = None
        net(x).sum().backward()
        log.append(r(x.grad))
        with pytest.raises(RuntimeError, match="global"):
            mod.register_module_backward_hook(lambda m, gi, go: None)
        return log

    try:
        ours = run(nn, umodule, Tensor)
        assert ours == run(torch.nn, tmodule, torch.tensor)
    finally:
        # (the kind of global backward hooks registered stays set, in torch's module as here)
        umodule._GLOBAL.full_backward = tmodule._global_is_full_backward_hook = None
    assert [entry[:2] for entry in ours[:3]] == [("pre", "Net"), ("pre", "Tanh"), ("hook", "Tanh")]


@pytest.mark.parametrize("name", ["BatchNorm1d", "BatchNorm2d", "InstanceNorm1d"])
def test_a_norm_without_running_stats_holds_none_as_torchs(name):
    # `bn.running_mean is None` is how torch code (fusion, converters) tells: the attribute was missing
    ours, theirs = (
        getattr(nn, name)(3, track_running_stats=False),
        getattr(torch.nn, name)(3, track_running_stats=False),
    )
    for attr in ("running_mean", "running_var", "num_batches_tracked"):
        assert getattr(ours, attr) is None and getattr(theirs, attr) is None
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_load_state_dict_assign_replaces_the_tensors_as_torch():
    # torch's assign=True: a parameter becomes a Parameter sharing the value's storage, with the requires_grad of the
    # one it replaces, in the value's dtype; a buffer becomes the value itself; tied weights come apart
    for T, mod in ((Tensor, nn), (torch, torch.nn)):
        layer = mod.Linear(2, 3)
        layer.weight.requires_grad_(False)
        old = layer.weight
        value = (
            T.ones(3, 2, dtype=T.float64) if T is torch else Tensor.ones(3, 2, dtype="float64").contiguous().realize()
        )
        layer.load_state_dict({"weight": value, "bias": T.zeros(3)}, assign=True)
        assert layer.weight is not old and type(layer.weight).__name__ == "Parameter"
        assert layer.weight.dtype == (torch.float64 if T is torch else dtypes.float64)
        assert not layer.weight.requires_grad
        assert layer.bias.requires_grad
        value[0, 0] = 5.0
        assert layer.weight[0, 0].item() == 5.0
        bn = mod.BatchNorm1d(2)
        given = {k: v.clone() for k, v in bn.state_dict().items()}
        bn.load_state_dict(given, assign=True)
        assert bn.running_mean is given["running_mean"] and bn.num_batches_tracked is given["num_batches_tracked"]
        assert [k for k, _ in bn.named_buffers()] == ["running_mean", "running_var", "num_batches_tracked"]
        with pytest.raises(RuntimeError, match="size mismatch|shape"):
            layer.load_state_dict({"weight": T.ones(2, 2), "bias": T.zeros(3)}, assign=True)
        a, b = mod.Linear(2, 2, bias=False), mod.Linear(2, 2, bias=False)
        b.weight = a.weight
        pair = mod.Sequential(a, b)
        pair.load_state_dict({"0.weight": T.ones(2, 2), "1.weight": T.zeros(2, 2)}, assign=True)
        assert pair[0].weight is not pair[1].weight
        assert (pair[0].weight.sum().item(), pair[1].weight.sum().item()) == (4.0, 0.0)


def test_load_state_dict_assign_keeps_a_parameter_value_itself_as_torch():
    # a Parameter in the state dict is put in place as that object (torch's assign=True wraps only plain tensors), so
    # what trains it (its .grad, an optimizer over its layer) is what the module now holds; its requires_grad follows
    # the parameter it replaces
    for mod in (nn, torch.nn):
        src, dst = mod.Linear(2, 3), mod.Linear(2, 3)
        dst.bias.requires_grad_(False)
        dst.load_state_dict({"weight": src.weight, "bias": src.bias}, assign=True)
        assert dst.weight is src.weight and dst.bias is src.bias
        assert dst.weight.requires_grad and not src.bias.requires_grad


def test_to_empty_keeps_the_tensor_objects_as_torch():
    for mod in (nn, torch.nn):
        model = mod.Sequential(mod.Linear(2, 3), mod.BatchNorm1d(3))
        weight, stats = model[0].weight, model[1].running_mean
        assert model.to_empty(device="cpu" if mod is torch.nn else "CPU") is model
        # (torch's buffers become new tensors there, ours stay the same objects, as `to()` keeps them)
        assert model[0].weight is weight and tuple(model[1].running_mean.shape) == (3,)
        assert tuple(weight.shape) == (3, 2) and weight.requires_grad and not stats.requires_grad
        shallow = mod.Sequential(mod.Linear(2, 3))
        shallow.to_empty(device="cpu" if mod is torch.nn else "CPU", recurse=False)
    layer = nn.Linear(2, 3).to_empty(device="CPU")
    # (the values are whatever the memory held: initialize them next)
    layer.load_state_dict({"weight": Tensor.ones(3, 2), "bias": Tensor.zeros(3)})
    assert layer(Tensor.ones(1, 2)).tolist() == [[2.0, 2.0, 2.0]]


def test_load_state_dict_while_a_lazy_value_reads_a_parameter():
    # the realize that writes the weight first copies what the pending value reads: that copy is a plain tensor (it
    # was made of the parameter's class, and nn.Parameter takes no graph: TypeError)
    layer = nn.Linear(3, 4, bias=False)
    layer.weight = nn.Parameter(layer.weight.detach())
    before = layer.weight.numpy().copy()
    out = layer(Tensor.ones(2, 5, 3))
    layer.load_state_dict({"weight": Tensor.zeros(4, 3)})
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(before.sum(1), (2, 5, 4)), rtol=1e-6)
    assert layer.weight.tolist() == [[0.0] * 3] * 4


def _torch_layer(name):
    # torch's twin of `_layer(name)`, built with the same arguments
    cls = getattr(torch.nn, name)
    if name == "Transformer":
        return cls(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    if name in ("TransformerEncoder", "TransformerDecoder"):
        return cls(getattr(torch.nn, name + "Layer")(8, 2, 16), 2)
    if name == "NLLLoss2d":
        return torch.nn.NLLLoss()
    return cls(*_LAYER_ARGS.get(name, ()))


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", [n for n in _PUBLIC_LAYERS if hasattr(torch.nn, n)])
def test_every_layer_prints_and_holds_parameters_as_torchs(name):
    # repr(model) as torch prints it (a training program's first output), and every learnable tensor an nn.Parameter
    # (`isinstance(p, nn.Parameter)` is how torch code picks parameters); buffers stay plain tensors, as torch's
    Tensor.manual_seed(0)
    ours, theirs = _layer(name), _torch_layer(name)
    assert repr(ours) == repr(theirs)
    assert [type(p).__name__ for _, p in ours.named_parameters()] == [
        type(p).__name__ for _, p in theirs.named_parameters()
    ]
    assert not any(isinstance(b, nn.Parameter) for b in ours.buffers())


def test_global_registration_hooks_as_torchs():
    # torch.nn.modules.module.register_module_{buffer,module,parameter}_registration_hook: every registration (built-in
    # layers' weights and running statistics, Sequential's and ModuleList's entries, register_*, attributes, a buffer
    # set again, a sub-module set to None; not a parameter set to None), in torch's order; a return replaces the value
    from torch.nn.modules import module as tmodule

    from uopkit.nn import module as umodule

    def run(lib, mod, make) -> list:
        log = []
        handles = [
            mod.register_module_buffer_registration_hook(
                lambda m, n, v: log.append(("buffer", type(m).__name__, n, None if v is None else tuple(v.shape)))
            ),
            mod.register_module_module_registration_hook(
                lambda m, n, v: log.append(("module", type(m).__name__, n, type(v).__name__))
            ),
            mod.register_module_parameter_registration_hook(
                lambda m, n, v: log.append(("parameter", type(m).__name__, n, tuple(v.shape)))
            ),
            # (replaces the values of "swap", whatever their kind)
            mod.register_module_buffer_registration_hook(lambda m, n, v: make([7.0]) if n == "swap" else None),
            mod.register_module_parameter_registration_hook(
                lambda m, n, v: lib.Parameter(make([8.0])) if n == "swap" else None
            ),
            mod.register_module_module_registration_hook(lambda m, n, v: lib.Tanh() if n == "swap" else None),
        ]

        class Net(lib.Module):
            def __init__(self):
                super().__init__()
                self.fc, self.bn = lib.Linear(2, 3), lib.BatchNorm1d(3)
                self.seq = lib.Sequential(lib.Linear(3, 3), lib.ReLU())
                self.ml = lib.ModuleList([lib.Tanh()])
                self.register_buffer("b", make([1.0]))
                self.register_parameter("p", lib.Parameter(make([1.0, 2.0])))
                self.q, self.plain = lib.Parameter(make([3.0])), 5

        net = Net()
        net.b = make([4.0, 5.0])
        net.fc = None
        net.register_parameter("p", None)
        net.add_module("extra", lib.Identity())
        holder = lib.Module()
        holder.register_buffer("swap", make([1.0]))
        log.append(holder.swap.tolist())
        holder = lib.Module()
        holder.swap = lib.Parameter(make([1.0]))
        log.append(holder.swap.tolist())
        holder = lib.Module()
        holder.add_module("swap", lib.ReLU())
        log.append(type(holder.swap).__name__)
        for h in handles:
            h.remove()
        lib.Linear(1, 1)
        return log

    want = run(torch.nn, tmodule, torch.tensor)
    assert run(nn, umodule, Tensor) == want
    assert [entry for entry in want if not isinstance(entry, tuple)] == [[7.0], [8.0], "Tanh"]


def _equal_lr(lib_nn) -> Callable:
    """The equalized learning rate of progressive GANs and StyleGAN ports, as written for torch: the weight moves out
    of `_parameters` to `weight_orig`, and a forward pre-hook sets the scaled weight before each call."""

    def apply(module, name="weight"):
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_orig", lib_nn.Parameter(weight.data))

        def hook(mod, inputs):
            w = getattr(mod, name + "_orig")
            setattr(mod, name, w * (2 / (w.data.size(1) * w.data[0][0].numel())) ** 0.5)

        module.register_forward_pre_hook(hook)
        return module

    return apply


def test_private_dicts_of_parameters_buffers_and_modules_as_torchs() -> None:
    # torch code reaches into a module's `_parameters`, `_buffers` and `_modules` (uopkit's Module had none: an
    # AttributeError): live views here, with torch's keys, order and effects of writes and deletes
    ours, theirs = _nets()
    for o, t in [(ours, theirs), (ours.fc, theirs.fc), (ours.bn, theirs.bn), (ours.extra, theirs.extra)]:
        assert list(o._parameters) == [k for k, v in t._parameters.items() if v is not None]
        assert list(o._buffers) == [k for k, v in t._buffers.items() if v is not None]
        assert list(o._modules) == list(t._modules)
    assert ours._parameters["scale"] is ours.scale and ours._modules["blocks"] is ours.blocks
    assert "offset" in ours._buffers and "fc" not in ours._parameters and len(ours._buffers) == 2
    # writes: a buffer set again keeps whether it is saved; a module's entry set and deleted
    ours._buffers["scratch"] = Tensor.ones(3)
    theirs._buffers["scratch"] = torch.ones(3)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours._modules["drop"] = nn.Identity()
    theirs._modules["drop"] = torch.nn.Identity()
    del ours._modules["heads"], theirs._modules["heads"]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    with pytest.raises(KeyError):
        del ours._parameters["offset"]


def test_equalized_lr_hook_through_private_parameters_trains_as_torch() -> None:
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    o, t = nn.Linear(6, 3), torch.nn.Linear(6, 3)
    o.weight.assign(Tensor(w)).realize()
    o.bias.assign(Tensor.zeros(3)).realize()
    with torch.no_grad():
        t.weight.copy_(torch.tensor(w))
        t.bias.zero_()
    _equal_lr(nn)(o)
    _equal_lr(torch.nn)(t)
    assert [n for n, _ in o.named_parameters()] == [n for n, _ in t.named_parameters()] == ["bias", "weight_orig"]
    assert list(o.state_dict()) == list(t.state_dict())
    opt, topt = SGD(o.parameters(), lr=0.1), torch.optim.SGD(t.parameters(), lr=0.1)
    for _ in range(3):
        loss, tloss = (o(Tensor(x)) ** 2).mean(), (t(torch.tensor(x)) ** 2).mean()
        opt.zero_grad()
        topt.zero_grad()
        loss.backward()
        tloss.backward()
        opt.step()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    np.testing.assert_allclose(o.weight_orig.numpy(), t.weight_orig.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_state_set_later_takes_torchs_place_in_the_order():
    # PEFT code leaves `self.prefix = None` in __init__ and sets a Parameter (or an adapter module) later: torch puts it
    # last among the parameters (modules), while a slot registered as None, or state set to None, keeps its place
    def build(tnn, param, zeros):
        class Layer(tnn.Module):
            def __init__(self):
                super().__init__()
                self.prefix = None
                self.adapter = None
                self.a = param(zeros(2))
                self.register_parameter("slot", None)
                self.w = param(zeros(2))
                self.first = tnn.Linear(2, 2)
                self.register_buffer("buf", None)
                self.register_buffer("stats", zeros(2))
                self.second = tnn.Linear(2, 2)

        m = Layer()
        m.prefix = param(zeros(2))
        m.slot = param(zeros(2))
        m.a = None
        m.a = param(zeros(2))
        m.adapter = tnn.Linear(2, 2)
        m.first = None
        m.first = tnn.Linear(2, 2)
        m.buf = zeros(2)
        return m

    ours, theirs = build(nn, nn.Parameter, Tensor.zeros), build(torch.nn, torch.nn.Parameter, torch.zeros)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]


REGISTRATIONS = {
    # a torch-style module's plain None attribute, a None parameter slot, and a parameter: what registering a name
    # over each, or setting a module there, raises (or not) in torch
    "buffer over plain None": lambda m, lib, T: m.register_buffer("mask", T([1.0])),
    "parameter over plain None": lambda m, lib, T: m.register_parameter("mask", lib.Parameter(T([1.0]))),
    "module over plain None": lambda m, lib, T: m.add_module("mask", lib.Linear(1, 1)),
    "buffer over None parameter": lambda m, lib, T: m.register_buffer("b", T([1.0])),
    "parameter over None parameter": lambda m, lib, T: m.register_parameter("b", lib.Parameter(T([1.0]))),
    "buffer after del": lambda m, lib, T: (delattr(m, "mask"), m.register_buffer("mask", T([1.0]))),
    "parameter set over plain None": lambda m, lib, T: setattr(m, "mask", lib.Parameter(T([1.0]))),
    "module set over parameter": lambda m, lib, T: setattr(m, "w", lib.Linear(1, 1)),
    "module set over None parameter": lambda m, lib, T: setattr(m, "b", lib.Linear(1, 1)),
    "module set over buffer": lambda m, lib, T: setattr(m, "buf", lib.Linear(1, 1)),
    "bias of Linear(bias=False)": lambda m, lib, T: lib.Linear(2, 2, bias=False).register_parameter(
        "bias", lib.Parameter(T([1.0, 2.0]))
    ),
}


@pytest.mark.parametrize("case", list(REGISTRATIONS))
def test_registration_over_held_names_as_torch(case):
    def outcome(lib, T):
        class M(lib.Module):
            def __init__(self):
                super().__init__()
                self.w = lib.Parameter(T([1.0]))
                self.register_parameter("b", None)
                self.register_buffer("buf", T([1.0]))
                self.mask = None

        m = M()
        try:
            REGISTRATIONS[case](m, lib, T)
        except (KeyError, TypeError) as e:
            return type(e)
        return sorted(name for name, _ in m.named_parameters()), sorted(name for name, _ in m.named_buffers())

    theirs = outcome(torch.nn, torch.tensor)
    ours = outcome(nn, Tensor)
    assert ours == theirs
