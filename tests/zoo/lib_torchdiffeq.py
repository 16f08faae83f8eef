"""torchdiffeq: neural ODEs (a fixed-step RK4 block, an adaptive dopri5 block, the adjoint method,
a latent ODE with a GRU encoder), small MLP dynamics of width 16 on 2 random vectors."""
from __future__ import annotations

import torch
from torch import nn
from torchdiffeq import odeint, odeint_adjoint

from .registry import Built, specimen

FAMILY = "torchdiffeq"
WIDTH = 16


class Dynamics(nn.Module):
    """dy/dt = f(t, y): a small MLP that also sees the time."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width + 1, 32), nn.Tanh(), nn.Linear(32, width))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([y, t.expand(*y.shape[:-1], 1)], dim=-1))


class ODEClassifier(nn.Module):
    """An ODE block between a linear stem and head (torchdiffeq's ODE-Net), integrated with ``solve``."""

    def __init__(self, solve: object = odeint, **options: object) -> None:
        super().__init__()
        self.stem, self.dynamics, self.head = nn.Linear(8, WIDTH), Dynamics(), nn.Linear(WIDTH, 4)
        self.solve, self.options = solve, options
        self.register_buffer("times", torch.tensor([0.0, 1.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.solve(self.dynamics, self.stem(x), self.times, **self.options)[-1])


class LatentODE(nn.Module):
    """A GRU reads an irregular series backwards into an initial state, an ODE carries it to each time,
    a linear decoder reads each state out (Rubanova et al.'s latent ODE, deterministic)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder, self.dynamics, self.decoder = nn.GRU(2, WIDTH, batch_first=True), Dynamics(), nn.Linear(WIDTH, 2)

    def forward(self, series: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        _, state = self.encoder(series.flip(1))
        return self.decoder(odeint(self.dynamics, state[0], times, method="rk4", options=dict(step_size=0.25)))


@specimen(FAMILY, name="ode_rk4")
def ode_rk4() -> Built:
    return ODEClassifier(method="rk4", options=dict(step_size=0.25)), (torch.randn(2, 8),)


@specimen(FAMILY, name="ode_dopri5")
def ode_dopri5() -> Built:
    return ODEClassifier(rtol=1e-3, atol=1e-4), (torch.randn(2, 8),)


@specimen(FAMILY, name="ode_adjoint")
def ode_adjoint() -> Built:
    return ODEClassifier(odeint_adjoint, method="rk4", options=dict(step_size=0.25)), (torch.randn(2, 8),)


@specimen(FAMILY, name="ode_latent")
def ode_latent() -> Built:
    return LatentODE(), (torch.randn(2, 6, 2), torch.linspace(0.0, 1.0, 4))
