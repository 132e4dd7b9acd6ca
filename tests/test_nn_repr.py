"""repr() of modules against torch's (nn/reprs.py, nn/torch_reprs.py): each layer's settings in torch's words, with
arguments other than the defaults, nested modules indented, a ModuleList's repeated layers grouped, a user module's
own extra_repr; and the built-in layers' learnable tensors as nn.Parameter objects through conversions, copies,
pickling and loading. Every layer with its default arguments is compared in tests/test_nn_module.py."""

import copy
import pickle

import numpy as np
import pytest

from uopkit import Tensor, nn

torch = pytest.importorskip("torch")

# (layer name, positional arguments, keyword arguments): options torch prints only when they differ from the defaults
_CASES = [
    ("Linear", (4, 8), {"bias": False}),
    ("Bilinear", (2, 3, 4), {"bias": False}),
    ("Conv1d", (2, 4, 3), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2, "bias": False}),
    ("Conv2d", (3, 16, 3), {"padding": 1}),
    ("Conv2d", (3, 16, (3, 5)), {"padding": "same", "padding_mode": "reflect"}),
    ("Conv3d", (2, 2, 1), {"padding_mode": "circular", "padding": 1}),
    ("ConvTranspose2d", (4, 2, 3), {"stride": 2, "output_padding": 1, "groups": 2}),
    ("BatchNorm2d", (16,), {}),
    ("BatchNorm1d", (4,), {"eps": 1e-3, "momentum": None, "affine": False, "track_running_stats": False}),
    ("InstanceNorm2d", (3,), {"affine": True, "track_running_stats": True}),
    ("LayerNorm", ((2, 3),), {"eps": 1e-6, "elementwise_affine": False}),
    ("GroupNorm", (2, 4), {"affine": False}),
    ("RMSNorm", (4,), {"eps": 1e-6, "elementwise_affine": False}),
    ("LocalResponseNorm", (3,), {"alpha": 0.1, "k": 2.0}),
    ("Embedding", (10, 3), {"padding_idx": 0}),
    ("Embedding", (10, 3), {"max_norm": 1.0, "norm_type": 1.0, "scale_grad_by_freq": True, "sparse": True}),
    ("EmbeddingBag", (10, 3), {"mode": "sum", "max_norm": 2.0, "padding_idx": 1}),
    ("LSTM", (8, 16), {"num_layers": 2, "batch_first": True}),
    ("GRU", (4, 8), {"bias": False, "dropout": 0.5, "bidirectional": True, "num_layers": 2}),
    ("LSTM", (4, 8), {"proj_size": 2}),
    ("RNNCell", (4, 8), {"bias": False, "nonlinearity": "relu"}),
    ("GRUCell", (4, 8), {"bias": False}),
    ("ReLU", (), {"inplace": True}),
    ("ReLU6", (), {"inplace": True}),
    ("SiLU", (), {"inplace": True}),
    ("ELU", (0.5,), {"inplace": True}),
    ("CELU", (2.0,), {}),
    ("LeakyReLU", (0.2,), {"inplace": True}),
    ("Hardtanh", (-2.0, 2.0), {}),
    ("Threshold", (0.1, 20.0), {"inplace": True}),
    ("RReLU", (0.1, 0.3), {}),
    ("Hardswish", (), {"inplace": True}),
    ("Softshrink", (0.3,), {}),
    ("PReLU", (3,), {}),
    ("GELU", (), {"approximate": "tanh"}),
    ("Softmax", (), {"dim": 1}),
    ("Dropout", (0.5,), {}),
    ("Dropout2d", (0.1,), {"inplace": True}),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}),
    ("MaxPool1d", ((2,),), {}),
    ("AvgPool1d", (3,), {"stride": 2}),
    ("AvgPool2d", ((2, 3),), {"padding": 1, "ceil_mode": True}),
    ("MaxUnpool2d", (2,), {"stride": 1}),
    ("AdaptiveAvgPool2d", ((1, 1),), {}),
    ("AdaptiveMaxPool1d", (4,), {"return_indices": True}),
    ("LPPool2d", (2, 3), {"stride": 2}),
    ("ConstantPad2d", ((1, 2, 3, 4), 0.5), {}),
    ("ZeroPad2d", (2,), {}),
    ("ReflectionPad1d", ((1, 2),), {}),
    ("Upsample", (), {"scale_factor": 2.0, "mode": "bilinear"}),
    ("Flatten", (0, 2), {}),
    ("Unflatten", (1, (2, 3)), {}),
    ("PixelShuffle", (3,), {}),
    ("Fold", ((4, 5), (2, 2)), {"stride": 2}),
    ("Unfold", ((2, 3),), {"padding": 1}),
    ("CrossEntropyLoss", (), {"label_smoothing": 0.1, "reduction": "sum"}),
    ("TripletMarginWithDistanceLoss", (), {"margin": 2.0}),
    ("MultiheadAttention", (8, 2), {"add_bias_kv": True, "kdim": 4, "vdim": 4}),
    ("TransformerEncoderLayer", (8, 2, 16), {"norm_first": True, "batch_first": True}),
    ("AdaptiveLogSoftmaxWithLoss", (8, 10, [4, 8]), {"head_bias": True}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), _CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(_CASES)])
def test_layer_repr_with_other_arguments_is_torchs(name, args, kwargs):
    assert repr(getattr(nn, name)(*args, **kwargs)) == repr(getattr(torch.nn, name)(*args, **kwargs))


def _model(lib):
    class Net(lib.Module):
        def __init__(self):
            super().__init__()
            self.features = lib.Sequential(lib.Conv2d(3, 16, 3, padding=1), lib.BatchNorm2d(16), lib.ReLU(inplace=True))
            self.blocks = lib.ModuleList([lib.Linear(4, 4) for _ in range(3)] + [lib.Linear(4, 2), lib.Linear(4, 2)])
            self.heads = lib.ModuleDict({"a": lib.Linear(2, 1), "b": lib.Identity()})
            self.hidden = 4  # a plain attribute: torch's Module prints nothing of it
            self.mha = lib.MultiheadAttention(4, 2)

    return Net()


def test_nested_model_repr_is_torchs():
    # nested blocks indented, a ModuleList's run of equal layers as "(0-2): 3 x Linear(...)", a user module's plain
    # attributes left out
    assert repr(_model(nn)) == repr(_model(torch.nn))
    assert repr(nn.ModuleList()) == repr(torch.nn.ModuleList())
    assert "(0-2): 3 x Linear(in_features=4, out_features=4, bias=True)" in repr(_model(nn))


def test_user_extra_repr_is_shown_as_torchs():
    # extra_repr overridden by a module of one's own: on the same line without sub-modules, its lines above them with
    def build(lib, multi_line):
        class Scaled(lib.Module):
            def __init__(self, children):
                super().__init__()
                self.scale = 2.0
                if children:
                    self.inner = lib.Sequential(lib.Linear(2, 2), lib.Tanh())

            def extra_repr(self):
                return "scale=2.0\nmode=fast" if multi_line else f"scale={self.scale}"

        return [Scaled(False), Scaled(True)]

    for multi_line in (False, True):
        ours, theirs = build(nn, multi_line), build(torch.nn, multi_line)
        assert [repr(m) for m in ours] == [repr(m) for m in theirs]

    class Conv(nn.Conv2d):
        def extra_repr(self):
            return "custom"

    assert repr(Conv(1, 1, 1)) == "Conv(custom)"


def test_parameter_list_and_dict_repr_are_torchs():
    ours = nn.ParameterList([nn.Parameter(Tensor.zeros(2, 3)), nn.Parameter(Tensor.zeros(4))])
    theirs = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(4))])
    assert repr(ours) == repr(theirs)
    ours = nn.ParameterDict({"w": nn.Parameter(Tensor.zeros(2, 3))})
    theirs = torch.nn.ParameterDict({"w": torch.nn.Parameter(torch.zeros(2, 3))})
    assert repr(ours) == repr(theirs)


def _kinds(module):
    return [type(p).__name__ for p in module.parameters()], [type(b).__name__ for b in module.buffers()]


def test_layers_parameters_stay_parameters_through_conversions_copies_and_loading():
    # the same Parameter objects after .to(dtype)/.half()/.double() (torch's module.to keeps them), Parameters in a
    # deep copy, a pickled model and after load_state_dict (in place or assign=True); operations on one, .data and
    # .detach() give plain tensors, as torch's
    Tensor.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Embedding(5, 4), nn.LSTM(4, 4))
    theirs = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Embedding(5, 4), torch.nn.LSTM(4, 4)
    )
    assert _kinds(model) == (["Parameter"] * 9, ["Tensor"] * 3) == (_kinds(theirs)[0], _kinds(theirs)[1])
    before = list(model.parameters())
    model.half()
    model.double()
    assert all(a is b for a, b in zip(before, model.parameters(), strict=True))
    assert _kinds(copy.deepcopy(model)) == _kinds(model) == _kinds(pickle.loads(pickle.dumps(model)))
    copied = copy.deepcopy(model)
    np.testing.assert_array_equal(copied[0].weight.numpy(), model[0].weight.numpy())
    model.load_state_dict(copied.state_dict())
    assert all(a is b for a, b in zip(before, model.parameters(), strict=True))
    model.load_state_dict(copied.state_dict(), assign=True)
    assert _kinds(model)[0] == ["Parameter"] * 9
    w = model[0].weight
    for t, tt in ((w * 2, theirs[0].weight * 2), (w.detach(), theirs[0].weight.detach())):
        assert not isinstance(t, nn.Parameter) and not isinstance(tt, torch.nn.Parameter)
    assert not isinstance(w.data, nn.Parameter) and not isinstance(theirs[0].weight.data, torch.nn.Parameter)
    assert repr(nn.Linear(1, 1).bias).startswith("Parameter containing:\n")


def test_embedding_bag_given_weight_is_a_trained_parameter_as_torchs():
    # `_weight` became the layer's weight as it was: a tensor that requires no grad wasn't a parameter at all
    ours = nn.EmbeddingBag(3, 2, _weight=Tensor.ones(3, 2))
    theirs = torch.nn.EmbeddingBag(3, 2, _weight=torch.ones(3, 2))
    assert [(k, type(p).__name__, p.requires_grad) for k, p in ours.named_parameters()] == [
        (k, type(p).__name__, p.requires_grad) for k, p in theirs.named_parameters()
    ]
    frozen = nn.EmbeddingBag.from_pretrained(Tensor.ones(3, 2))
    assert isinstance(frozen.weight, nn.Parameter) and not frozen.weight.requires_grad
    assert [k for k, _ in frozen.named_parameters()] == ["weight"]


def test_seeded_layers_draw_the_same_weights_as_parameters():
    # the weights are the values drawn before (Parameter made in place: no copy, no other draw)
    Tensor.manual_seed(3)
    a = nn.Linear(3, 2)
    Tensor.manual_seed(3)
    expected = Tensor._rng().uniform(-1 / np.sqrt(3), 1 / np.sqrt(3), (2, 3)).astype(np.float32)
    np.testing.assert_array_equal(a.weight.numpy(), expected)


def test_parametrized_and_averaged_models_print_as_torchs():
    from uopkit.nn.swa_utils import AveragedModel
    from uopkit.nn.utils import parametrizations

    for fn in ("weight_norm", "spectral_norm"):
        ours = getattr(parametrizations, fn)(nn.Linear(2, 3))
        theirs = getattr(torch.nn.utils.parametrizations, fn)(torch.nn.Linear(2, 3))
        assert repr(ours) == repr(theirs)
    assert repr(AveragedModel(nn.Linear(2, 2))) == repr(torch.optim.swa_utils.AveragedModel(torch.nn.Linear(2, 2)))
