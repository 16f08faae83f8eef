"""GPyTorch: Gaussian processes as their training loop optimizes them, each module returning the
negative marginal log likelihood (or ELBO) of 16 random points: an exact GP (RBF kernel), a
variational GP with learned inducing points, and deep kernel learning (an MLP feature extractor
under an exact GP)."""
from __future__ import annotations

import gpytorch
import torch
from torch import nn

from .registry import Built, specimen

FAMILY = "gpytorch"
POINTS = 16


class ExactGP(gpytorch.models.ExactGP):
    def __init__(self, x: torch.Tensor, y: torch.Tensor, likelihood: gpytorch.likelihoods.Likelihood,
                 features: nn.Module | None = None) -> None:
        super().__init__(x, y, likelihood)
        self.features = features or nn.Identity()
        self.mean = gpytorch.means.ConstantMean()
        self.covariance = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        z = self.features(x)
        return gpytorch.distributions.MultivariateNormal(self.mean(z), self.covariance(z))


class VariationalGP(gpytorch.models.ApproximateGP):
    def __init__(self, inducing: torch.Tensor) -> None:
        distribution = gpytorch.variational.CholeskyVariationalDistribution(inducing.shape[0])
        super().__init__(gpytorch.variational.VariationalStrategy(self, inducing, distribution,
                                                                  learn_inducing_locations=True))
        self.mean = gpytorch.means.ConstantMean()
        self.covariance = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean(x), self.covariance(x))


class Objective(nn.Module):
    """The negative objective GPyTorch's training loop minimizes: ``-mll(model(x), y)``."""

    def __init__(self, mll: gpytorch.mlls.MarginalLogLikelihood) -> None:
        super().__init__()
        self.mll = mll

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return -self.mll(self.mll.model(x), y)


def data(width: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(POINTS, width)
    return x, torch.sin(6 * x.sum(-1)) + 0.1 * torch.randn(POINTS)


@specimen(FAMILY, name="gp_exact")
def gp_exact() -> Built:
    x, y = data()
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    return Objective(gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, ExactGP(x, y, likelihood))), (x, y)


@specimen(FAMILY, name="gp_variational")
def gp_variational() -> Built:
    x, y = data()
    model, likelihood = VariationalGP(torch.rand(6, 1)), gpytorch.likelihoods.GaussianLikelihood()
    return Objective(gpytorch.mlls.VariationalELBO(likelihood, model, num_data=POINTS)), (x, y)


@specimen(FAMILY, name="gp_deep_kernel")
def gp_deep_kernel() -> Built:
    x, y = data(width=4)
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    features = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    return Objective(gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, ExactGP(x, y, likelihood, features))), (x, y)
