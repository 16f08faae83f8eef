"""vector-quantize-pytorch: its quantizers (an EMA codebook, a residual stack, finite scalar and
lookup-free quantization) between a linear encoder and decoder, as an autoencoder trains them: the
reconstruction error plus the quantizer's own loss, on 2 x 16 random vectors of width 16."""
from __future__ import annotations

import torch
from torch import nn
from vector_quantize_pytorch import FSQ, LFQ, ResidualVQ, VectorQuantize

from .registry import Built, specimen

FAMILY = "vector_quantize_pytorch"
WIDTH = 16


class AutoEncoder(nn.Module):
    """encoder -> quantizer -> decoder; the loss a VQ autoencoder trains on."""

    def __init__(self, quantizer: nn.Module, code_width: int = WIDTH) -> None:
        super().__init__()
        self.encoder, self.quantizer = nn.Linear(WIDTH, code_width), quantizer
        self.decoder = nn.Linear(code_width, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        quantized, _, *aux = self.quantizer(self.encoder(x))
        loss = (self.decoder(quantized) - x).pow(2).mean()
        return loss + sum(extra.sum() for extra in aux if torch.is_tensor(extra) and extra.is_floating_point())


def vectors() -> tuple[torch.Tensor]:
    return (torch.randn(2, 16, WIDTH),)


@specimen(FAMILY, name="vq_vector_quantize")
def vq_vector_quantize() -> Built:
    return AutoEncoder(VectorQuantize(dim=WIDTH, codebook_size=32, decay=0.8, commitment_weight=1.0)), vectors()


@specimen(FAMILY, name="vq_residual_vq")
def vq_residual_vq() -> Built:
    quantizer = ResidualVQ(dim=WIDTH, num_quantizers=2, codebook_size=32, codebook_dim=8, decay=0.8)
    return AutoEncoder(quantizer), vectors()


@specimen(FAMILY, name="vq_fsq")
def vq_fsq() -> Built:
    return AutoEncoder(FSQ(levels=[8, 5, 5], dim=WIDTH)), vectors()


@specimen(FAMILY, name="vq_lfq")
def vq_lfq() -> Built:
    return AutoEncoder(LFQ(dim=WIDTH, codebook_size=64, entropy_loss_weight=0.1, diversity_gamma=1.0)), vectors()
