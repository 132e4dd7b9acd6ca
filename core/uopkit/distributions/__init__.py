"""uopkit.distributions: torch.distributions' API for the families real programs use (VAEs, policy gradients, mixture
models), over lazy uopkit Tensors. Random draws come from uopkit's seeded generator (`Tensor.manual_seed`), not
torch's, so the values differ from torch's draws while their distribution is the same.

The families live in modules by kind, all re-exported here: the base class and shared helpers
(distributions/distribution.py), constraints (distributions/constraints.py), the simple continuous families
(distributions/continuous.py), Gamma, Chi2, StudentT, FisherSnedecor, Beta and Dirichlet with their sampler
(distributions/gamma.py), the discrete families with the Poisson sampler (distributions/discrete.py),
MultivariateNormal, LowRankMultivariateNormal, Independent and MixtureSameFamily (distributions/multivariate.py),
VonMises (distributions/circular.py), LKJCholesky and Wishart (distributions/matrix.py), the transforms
(distributions/transforms.py) and biject_to/transform_to (distributions/constraint_registry.py),
TransformedDistribution with LogNormal and LogisticNormal (distributions/transformed_distribution.py), the relaxed
Bernoulli/categorical families and ContinuousBernoulli (distributions/relaxed.py), kl_divergence
(distributions/kl.py) and torch.distributions.utils' helpers (distributions/utils.py).

>>> from uopkit import Tensor
>>> from uopkit.distributions import Normal, kl_divergence
>>> Normal(Tensor([0.0, 1.0]), 1.0).sample((5,)).shape
(5, 2)
"""

from uopkit.distributions import constraint_registry as constraint_registry
from uopkit.distributions import constraints as constraints
from uopkit.distributions import transforms as transforms
from uopkit.distributions import utils as utils
from uopkit.distributions.circular import VonMises
from uopkit.distributions.constraint_registry import biject_to, transform_to
from uopkit.distributions.continuous import (
    Cauchy,
    Exponential,
    Gumbel,
    HalfCauchy,
    HalfNormal,
    Kumaraswamy,
    Laplace,
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
    OneHotCategoricalStraightThrough,
    Poisson,
)
from uopkit.distributions.distribution import Distribution
from uopkit.distributions.gamma import Beta, Chi2, Dirichlet, FisherSnedecor, Gamma, StudentT
from uopkit.distributions.kl import kl_divergence, register_kl
from uopkit.distributions.matrix import LKJCholesky, Wishart
from uopkit.distributions.multivariate import (
    Independent,
    LowRankMultivariateNormal,
    MixtureSameFamily,
    MultivariateNormal,
)
from uopkit.distributions.relaxed import (
    ContinuousBernoulli,
    ExpRelaxedCategorical,
    LogitRelaxedBernoulli,
    RelaxedBernoulli,
    RelaxedOneHotCategorical,
)
from uopkit.distributions.transformed_distribution import LogisticNormal, LogNormal, TransformedDistribution
from uopkit.distributions.transforms import (
    AbsTransform,
    AffineTransform,
    CatTransform,
    ComposeTransform,
    CorrCholeskyTransform,
    CumulativeDistributionTransform,
    ExpTransform,
    IndependentTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    PowerTransform,
    ReshapeTransform,
    SigmoidTransform,
    SoftmaxTransform,
    SoftplusTransform,
    StackTransform,
    StickBreakingTransform,
    TanhTransform,
    Transform,
    identity_transform,
)

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "Bernoulli",
    "Beta",
    "Binomial",
    "CatTransform",
    "Categorical",
    "Cauchy",
    "Chi2",
    "ComposeTransform",
    "ContinuousBernoulli",
    "CorrCholeskyTransform",
    "CumulativeDistributionTransform",
    "Dirichlet",
    "Distribution",
    "ExpRelaxedCategorical",
    "ExpTransform",
    "Exponential",
    "FisherSnedecor",
    "Gamma",
    "Geometric",
    "Gumbel",
    "HalfCauchy",
    "HalfNormal",
    "Independent",
    "IndependentTransform",
    "Kumaraswamy",
    "LKJCholesky",
    "Laplace",
    "LogNormal",
    "LogisticNormal",
    "LogitRelaxedBernoulli",
    "LowRankMultivariateNormal",
    "LowerCholeskyTransform",
    "MixtureSameFamily",
    "Multinomial",
    "MultivariateNormal",
    "NegativeBinomial",
    "Normal",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Pareto",
    "PositiveDefiniteTransform",
    "PowerTransform",
    "Poisson",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
    "ReshapeTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StackTransform",
    "StickBreakingTransform",
    "StudentT",
    "TanhTransform",
    "Transform",
    "TransformedDistribution",
    "Uniform",
    "VonMises",
    "Weibull",
    "Wishart",
    "biject_to",
    "constraint_registry",
    "constraints",
    "identity_transform",
    "kl_divergence",
    "register_kl",
    "transform_to",
    "transforms",
    "utils",
]
