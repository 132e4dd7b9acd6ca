"""uopkit.distributions: torch.distributions' API for the families real programs use (VAEs, policy gradients, mixture
models), over lazy uopkit Tensors. Random draws come from uopkit's seeded generator (`Tensor.manual_seed`), not
torch's, so the values differ from torch's draws while their distribution is the same.

The families live in modules by kind, all re-exported here: the base class and shared helpers
(distributions/distribution.py), constraints (distributions/constraints.py), the simple continuous families
(distributions/continuous.py), Gamma, Chi2, StudentT, Beta and Dirichlet with their sampler (distributions/gamma.py),
the discrete families with the Poisson sampler (distributions/discrete.py), MultivariateNormal,
LowRankMultivariateNormal, Independent and MixtureSameFamily (distributions/multivariate.py), VonMises
(distributions/circular.py), and kl_divergence (distributions/kl.py).

>>> from uopkit import Tensor
>>> from uopkit.distributions import Normal, kl_divergence
>>> Normal(Tensor([0.0, 1.0]), 1.0).sample((5,)).shape
(5, 2)
"""

from uopkit.distributions import constraints as constraints
from uopkit.distributions.circular import VonMises
from uopkit.distributions.continuous import (
    Cauchy,
    Exponential,
    Gumbel,
    HalfCauchy,
    HalfNormal,
    Kumaraswamy,
    Laplace,
    LogNormal,
    Normal,
    Pareto,
    Uniform,
    Weibull,
)
from uopkit.distributions.discrete import (
    Bernoulli,
    Binomial,
    Categorical,
    Geometric,
    Multinomial,
    NegativeBinomial,
    OneHotCategorical,
    Poisson,
)
from uopkit.distributions.distribution import Distribution
from uopkit.distributions.gamma import Beta, Chi2, Dirichlet, Gamma, StudentT
from uopkit.distributions.kl import kl_divergence, register_kl
from uopkit.distributions.multivariate import (
    Independent,
    LowRankMultivariateNormal,
    MixtureSameFamily,
    MultivariateNormal,
)

__all__ = [
    "Bernoulli",
    "Beta",
    "Binomial",
    "Categorical",
    "Cauchy",
    "Chi2",
    "Dirichlet",
    "Distribution",
    "Exponential",
    "Gamma",
    "Geometric",
    "Gumbel",
    "HalfCauchy",
    "HalfNormal",
    "Independent",
    "Kumaraswamy",
    "Laplace",
    "LogNormal",
    "LowRankMultivariateNormal",
    "MixtureSameFamily",
    "Multinomial",
    "MultivariateNormal",
    "NegativeBinomial",
    "Normal",
    "OneHotCategorical",
    "Pareto",
    "Poisson",
    "StudentT",
    "Uniform",
    "VonMises",
    "Weibull",
    "constraints",
    "kl_divergence",
    "register_kl",
]
