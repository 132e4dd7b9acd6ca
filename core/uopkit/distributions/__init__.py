"""uopkit.distributions: torch.distributions' API for the families real programs use (VAEs, policy gradients, mixture
models), over lazy uopkit Tensors. Random draws come from uopkit's seeded generator (`Tensor.manual_seed`), not
torch's, so the values differ from torch's draws while their distribution is the same.

The families live in modules by kind, all re-exported here: the base class and shared helpers
(distributions/distribution.py), constraints (distributions/constraints.py), the simple continuous families
(distributions/continuous.py), Gamma, Beta and Dirichlet with their sampler (distributions/gamma.py), the discrete
families (distributions/discrete.py), MultivariateNormal, Independent and MixtureSameFamily
(distributions/multivariate.py), and kl_divergence (distributions/kl.py).

>>> from uopkit import Tensor
>>> from uopkit.distributions import Normal, kl_divergence
>>> Normal(Tensor([0.0, 1.0]), 1.0).sample((5,)).shape
(5, 2)
"""

from uopkit.distributions import constraints as constraints
from uopkit.distributions.continuous import Exponential, Laplace, LogNormal, Normal, Uniform
from uopkit.distributions.discrete import Bernoulli, Binomial, Categorical, Geometric, OneHotCategorical, Poisson
from uopkit.distributions.distribution import Distribution
from uopkit.distributions.gamma import Beta, Dirichlet, Gamma
from uopkit.distributions.kl import kl_divergence, register_kl
from uopkit.distributions.multivariate import Independent, MixtureSameFamily, MultivariateNormal

__all__ = [
    "Bernoulli",
    "Beta",
    "Binomial",
    "Categorical",
    "Dirichlet",
    "Distribution",
    "Exponential",
    "Gamma",
    "Geometric",
    "Independent",
    "Laplace",
    "LogNormal",
    "MixtureSameFamily",
    "MultivariateNormal",
    "Normal",
    "OneHotCategorical",
    "Poisson",
    "Uniform",
    "constraints",
    "kl_divergence",
    "register_kl",
]
