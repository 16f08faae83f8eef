"""e3nn: E(3)-equivariant layers (a linear map between irreps, a fully connected tensor product, a
gated nonlinearity, equivariant batch norm) and a small point-cloud convolution built from them as
e3nn's own networks are (spherical harmonics of the edges, a radial MLP giving the tensor product's
weights, a gate), on random features and 2 clouds of 6 points."""
from __future__ import annotations

import torch
from e3nn import nn as enn
from e3nn import o3
from torch import nn

from .registry import Built, specimen

FAMILY = "e3nn"
HIDDEN = o3.Irreps("4x0e + 2x1o")


def features(irreps: o3.Irreps, count: int = 4) -> torch.Tensor:
    return torch.randn(count, o3.Irreps(irreps).dim)


def gate(irreps_out: str = "2x0e + 2x1o") -> enn.Gate:
    """scalars pass through silu; each vector is scaled by a sigmoid gate (one gate scalar per vector)."""
    out = o3.Irreps(irreps_out)
    scalars, gated = o3.Irreps([m for m in out if m.ir.l == 0]), o3.Irreps([m for m in out if m.ir.l > 0])
    return enn.Gate(scalars, [torch.nn.functional.silu], o3.Irreps(f"{gated.num_irreps}x0e"), [torch.sigmoid], gated)


@specimen(FAMILY, name="e3nn_linear")
def e3nn_linear() -> Built:
    return o3.Linear(HIDDEN, "2x0e + 3x1o + 1x2e"), (features(HIDDEN),)


@specimen(FAMILY, name="e3nn_tensor_product")
def e3nn_tensor_product() -> Built:
    model = o3.FullyConnectedTensorProduct("2x0e + 1x1o", "1x0e + 1x1o", "2x0e + 1x1o + 1x1e")
    return model, (features("2x0e + 1x1o"), features("1x0e + 1x1o"))


@specimen(FAMILY, name="e3nn_gated_block")
def e3nn_gated_block() -> Built:
    block = gate()
    model = nn.Sequential(o3.Linear(HIDDEN, block.irreps_in), block, enn.BatchNorm(block.irreps_out),
                          o3.Linear(block.irreps_out, "1x0e"))
    return model, (features(HIDDEN, count=6),)


class PointConvolution(nn.Module):
    """One equivariant convolution over every pair of points in each cloud, then a gate and a read-out of
    one scalar per cloud: the layout of e3nn's gate_points networks, without a neighbour search."""

    def __init__(self, irreps_in: str = "2x0e", lmax: int = 2) -> None:
        super().__init__()
        self.sh = o3.SphericalHarmonics(o3.Irreps.spherical_harmonics(lmax), normalize=True, normalization="component")
        self.gate = gate("4x0e + 2x1o + 1x2e")
        self.tp = o3.FullyConnectedTensorProduct(irreps_in, self.sh.irreps_out, self.gate.irreps_in, shared_weights=False)
        self.radial = enn.FullyConnectedNet([4, 16, self.tp.weight_numel], torch.nn.functional.silu)
        self.readout = o3.Linear(self.gate.irreps_out, "1x0e")

    def forward(self, positions: torch.Tensor, node_features: torch.Tensor) -> torch.Tensor:
        clouds, points, _ = positions.shape
        edges = (positions[:, :, None] - positions[:, None, :]).reshape(-1, 3)
        source = torch.arange(points).repeat(points).repeat(clouds) + torch.arange(clouds).repeat_interleave(points ** 2) * points
        length = edges.norm(dim=-1, keepdim=True)
        basis = torch.cat([torch.cos(length * k) for k in range(1, 5)], dim=-1)
        messages = self.tp(node_features.reshape(-1, node_features.shape[-1])[source], self.sh(edges), self.radial(basis))
        target = torch.arange(clouds * points).repeat_interleave(points)
        nodes = torch.zeros(clouds * points, messages.shape[-1]).index_add(0, target, messages) / points
        return self.readout(self.gate(nodes)).reshape(clouds, points).sum(-1)


@specimen(FAMILY, name="e3nn_point_convolution")
def e3nn_point_convolution() -> Built:
    return PointConvolution(), (torch.randn(2, 6, 3), torch.randn(2, 6, 2))
