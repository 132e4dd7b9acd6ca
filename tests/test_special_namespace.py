"""uopkit.special (core/uopkit/special.py): every name against torch.special's function of that name (argument
order and aliases included: polygamma(n, x), expit, gammaln, psi, gammainc), and the module's doctest."""

import doctest

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, dtypes, special

torch = pytest.importorskip("torch")
TS = torch.special
RNG = np.random.default_rng(3)
X = RNG.uniform(-3, 3, 40)
POS = RNG.uniform(0.1, 8, 40)
UNIT = RNG.uniform(0.01, 0.99, 40)
M = RNG.standard_normal((4, 5))


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


# name -> (uopkit.special call, torch.special call) on float64 inputs
CASES = {
    "erf": (lambda: special.erf(Tensor(X)), lambda: TS.erf(_t(X))),
    "erfc": (lambda: special.erfc(Tensor(X)), lambda: TS.erfc(_t(X))),
    "erfcx": (lambda: special.erfcx(Tensor(X)), lambda: TS.erfcx(_t(X))),
    "erfinv": (lambda: special.erfinv(Tensor(UNIT * 2 - 1)), lambda: TS.erfinv(_t(UNIT * 2 - 1))),
    "expit": (lambda: special.expit(Tensor(X)), lambda: TS.expit(_t(X))),
    "logit": (lambda: special.logit(Tensor(UNIT)), lambda: TS.logit(_t(UNIT))),
    "logit_eps": (lambda: special.logit(Tensor(UNIT), eps=0.2), lambda: TS.logit(_t(UNIT), eps=0.2)),
    "gammaln": (lambda: special.gammaln(Tensor(X)), lambda: TS.gammaln(_t(X))),
    "digamma": (lambda: special.digamma(Tensor(POS)), lambda: TS.digamma(_t(POS))),
    "psi": (lambda: special.psi(Tensor(POS)), lambda: TS.psi(_t(POS))),
    "polygamma": (lambda: special.polygamma(2, Tensor(POS)), lambda: TS.polygamma(2, _t(POS))),
    "multigammaln": (lambda: special.multigammaln(Tensor(POS + 2), 3), lambda: TS.multigammaln(_t(POS + 2), 3)),
    "i0": (lambda: special.i0(Tensor(X)), lambda: TS.i0(_t(X))),
    "i0e": (lambda: special.i0e(Tensor(X)), lambda: TS.i0e(_t(X))),
    "i1": (lambda: special.i1(Tensor(X)), lambda: TS.i1(_t(X))),
    "i1e": (lambda: special.i1e(Tensor(X)), lambda: TS.i1e(_t(X))),
    "ndtr": (lambda: special.ndtr(Tensor(X)), lambda: TS.ndtr(_t(X))),
    "ndtri": (lambda: special.ndtri(Tensor(UNIT)), lambda: TS.ndtri(_t(UNIT))),
    "log_ndtr": (lambda: special.log_ndtr(Tensor(X)), lambda: TS.log_ndtr(_t(X))),
    "xlogy": (lambda: special.xlogy(Tensor(X), Tensor(POS)), lambda: TS.xlogy(_t(X), _t(POS))),
    "xlogy_number_first": (lambda: special.xlogy(2.0, Tensor(POS)), lambda: TS.xlogy(2.0, _t(POS))),
    "xlogy_number_second": (lambda: special.xlogy(Tensor(X), 3.0), lambda: TS.xlogy(_t(X), 3.0)),
    "xlog1py": (lambda: special.xlog1py(Tensor(X), Tensor(POS)), lambda: TS.xlog1py(_t(X), _t(POS))),
    "zeta": (lambda: special.zeta(Tensor(POS + 1.5), Tensor(POS)), lambda: TS.zeta(_t(POS + 1.5), _t(POS))),
    "zeta_number_first": (lambda: special.zeta(3.0, Tensor(POS)), lambda: TS.zeta(3.0, _t(POS))),
    "entr": (lambda: special.entr(Tensor(X)), lambda: TS.entr(_t(X))),
    "sinc": (lambda: special.sinc(Tensor(X)), lambda: TS.sinc(_t(X))),
    "gammainc": (lambda: special.gammainc(Tensor(POS), Tensor(POS[::-1])), lambda: TS.gammainc(_t(POS), _t(POS[::-1]))),
    "gammaincc": (
        lambda: special.gammaincc(Tensor(POS), Tensor(POS[::-1])),
        lambda: TS.gammaincc(_t(POS), _t(POS[::-1])),
    ),
    "exp2": (lambda: special.exp2(Tensor(X)), lambda: TS.exp2(_t(X))),
    "expm1": (lambda: special.expm1(Tensor(X)), lambda: TS.expm1(_t(X))),
    "log1p": (lambda: special.log1p(Tensor(POS)), lambda: TS.log1p(_t(POS))),
    "round": (lambda: special.round(Tensor(X * 10)), lambda: TS.round(_t(X * 10))),
    "round_decimals": (lambda: special.round(Tensor(X), decimals=2), lambda: TS.round(_t(X), decimals=2)),
    "softmax": (lambda: special.softmax(Tensor(M), 0), lambda: TS.softmax(_t(M), 0)),
    "softmax_dtype": (
        lambda: special.softmax(Tensor(M).float(), -1, dtype=dtypes.float64),
        lambda: TS.softmax(_t(M).float(), -1, dtype=torch.float64),
    ),
    "log_softmax": (lambda: special.log_softmax(Tensor(M), 1), lambda: TS.log_softmax(_t(M), 1)),
    "logsumexp": (lambda: special.logsumexp(Tensor(M), 1), lambda: TS.logsumexp(_t(M), 1)),
    "logsumexp_keepdim": (
        lambda: special.logsumexp(Tensor(M), (0, 1), keepdim=True),
        lambda: TS.logsumexp(_t(M), (0, 1), keepdim=True),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_special_names_match_torch_special(name):
    ours, theirs = CASES[name]
    got, want = ours(), theirs()
    assert got.shape == tuple(want.shape)
    assert got.dtype == dtypes.float64
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_every_name_is_torchs_and_exported():
    assert uopkit.special is special and "special" in uopkit.__all__
    for name in special.__all__:
        assert callable(getattr(special, name)) and hasattr(torch.special, name), name


def test_two_numbers_are_refused():
    with pytest.raises(TypeError, match="one operand must be a Tensor"):
        special.xlogy(1.0, 2.0)


def test_module_docstring_examples():
    assert doctest.testmod(special).failed == 0
