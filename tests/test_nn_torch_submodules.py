"""torch.nn.modules' submodules (`batchnorm`, `conv`, `utils`, ...) and the private bases torch code checks a layer's
kind with (`_BatchNorm`, `_NormBase`, `_ConvNd`, `_InstanceNorm`, `_DropoutNd`), against torch's answers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import uopkit.nn as nn
from uopkit import Tensor

torch = pytest.importorskip("torch")

LAYERS = [
    ("BatchNorm1d", (4,)),
    ("BatchNorm2d", (4,)),
    ("BatchNorm3d", (4,)),
    ("SyncBatchNorm", (4,)),
    ("InstanceNorm2d", (4,)),
    ("LayerNorm", (4,)),
    ("GroupNorm", (2, 4)),
    ("Conv1d", (2, 3, 3)),
    ("Conv2d", (2, 3, 3)),
    ("ConvTranspose2d", (2, 3, 3)),
    ("ConvTranspose1d", (2, 3, 3)),
    ("Linear", (2, 3)),
    ("Dropout", ()),
    ("Dropout2d", ()),
    ("AlphaDropout", ()),
    ("ReLU", ()),
]
BASES = [
    ("batchnorm", "_NormBase"),
    ("batchnorm", "_BatchNorm"),
    ("instancenorm", "_InstanceNorm"),
    ("conv", "_ConvNd"),
    ("conv", "_ConvTransposeNd"),
    ("dropout", "_DropoutNd"),
]


@pytest.mark.parametrize("sub,base", BASES)
def test_private_bases_answer_isinstance_as_torchs(sub: str, base: str) -> None:
    # the checks a freezing, weight-decay or pruning pass makes: `isinstance(m, nn.modules.batchnorm._BatchNorm)`
    ours_base = getattr(getattr(nn.modules, sub), base)
    theirs_base = getattr(getattr(torch.nn.modules, sub), base)
    for name, args in LAYERS:
        theirs = isinstance(getattr(torch.nn, name)(*args), theirs_base)
        assert isinstance(getattr(nn, name)(*args), ours_base) == theirs, (base, name)
        assert issubclass(getattr(nn, name), ours_base) == theirs, (base, name)


def test_submodules_import_by_torchs_paths() -> None:
    from uopkit.nn.modules.batchnorm import BatchNorm2d, _BatchNorm
    from uopkit.nn.modules.conv import Conv2d, _ConvNd
    from uopkit.nn.modules.utils import _ntuple, _pair, _quadruple, _single, _triple

    assert BatchNorm2d is nn.BatchNorm2d and Conv2d is nn.Conv2d and isinstance(nn.Conv2d(1, 1, 1), _ConvNd)
    assert issubclass(nn.BatchNorm2d, _BatchNorm)
    tu = torch.nn.modules.utils
    for ours, theirs in ((_single, tu._single), (_pair, tu._pair), (_triple, tu._triple), (_quadruple, tu._quadruple)):
        assert ours(3) == theirs(3) and ours([1, 2]) == theirs([1, 2])
    assert _ntuple(5)(2) == tu._ntuple(5)(2)
    assert nn.modules.activation.ReLU is nn.ReLU and nn.modules.pooling.MaxPool2d is nn.MaxPool2d
    assert nn.modules.container.Sequential is nn.Sequential and nn.modules.module.Module is nn.Module
    assert nn.modules.normalization.LayerNorm is nn.LayerNorm and nn.modules.linear.Identity is nn.Identity


def _custom_bn(base: Any) -> Any:
    # a batch norm written as torch code subclasses its base: torch's positional arguments and _check_input_dim
    class Norm4d(base):
        def __init__(self, n: int) -> None:
            super().__init__(n, 1e-3, 0.3, True, True)

        def _check_input_dim(self, x: Any) -> None:
            if x.dim() != 4:
                raise ValueError(f"expected 4D input (got {x.dim()}D input)")

    return Norm4d


def test_a_subclass_of_batchnorm_base_takes_torchs_arguments() -> None:
    ours = _custom_bn(nn.modules.batchnorm._BatchNorm)(3)
    theirs = _custom_bn(torch.nn.modules.batchnorm._BatchNorm)(3)
    assert (ours.eps, ours.momentum, ours.affine) == (theirs.eps, theirs.momentum, theirs.affine) == (1e-3, 0.3, True)
    # a subclass is a batch norm, but other batch norms aren't instances of the subclass
    assert isinstance(ours, nn.modules.batchnorm._NormBase) and not isinstance(nn.BatchNorm2d(3), type(ours))
    x = np.random.default_rng(0).standard_normal((4, 3, 2, 2)).astype(np.float32)
    ours.train()
    out = ours(Tensor(x)).numpy()
    np.testing.assert_allclose(out, theirs.train()(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-6)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with pytest.raises(ValueError, match="expected 4D"):
        ours(Tensor(x[0]))
    with pytest.raises(NotImplementedError, match="_check_input_dim"):
        nn.modules.batchnorm._BatchNorm(3)(Tensor(x))
