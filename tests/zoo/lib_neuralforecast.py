"""neuralforecast: its forecasting networks (N-HiTS, N-BEATS, PatchTST, an LSTM encoder-decoder),
each built small from its own constructor (horizon 4, 16 steps of history, width 16), called as its
training step calls them: on a batch of windows (2 series, no exogenous variables). The batch is made
inside :class:`Windows` from its two tensors, so that the zoo's truth, which rechecks round-off on a
float64 copy of the top-level inputs, widens them too (a dict nested in the inputs it leaves float32,
and the float64 step then fails, keeping round-off as measured)."""
from __future__ import annotations

import torch

from .registry import Built, specimen
from .vision_ops import define_nms_if_missing

define_nms_if_missing()  # neuralforecast imports pytorch_lightning, which may import torchvision
from neuralforecast.models import LSTM, NBEATS, NHITS, PatchTST  # noqa: E402
from torch import nn  # noqa: E402

FAMILY = "neuralforecast"
HORIZON, HISTORY = 4, 16


class Windows(nn.Module):
    """The model called on the batch of windows its training step builds, from the series and its mask."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, insample_y: torch.Tensor, insample_mask: torch.Tensor) -> torch.Tensor:
        return self.model({"insample_y": insample_y, "insample_mask": insample_mask, "futr_exog": None,
                           "hist_exog": None, "stat_exog": None})


def windows() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, HISTORY, 1), torch.ones(2, HISTORY, 1)


@specimen(FAMILY, name="nf_nhits")
def nf_nhits() -> Built:
    model = NHITS(h=HORIZON, input_size=HISTORY, mlp_units=[[16, 16]] * 3, n_pool_kernel_size=[2, 2, 1],
                  n_freq_downsample=[2, 1, 1], dropout_prob_theta=0.1, max_steps=1)
    return Windows(model), windows()


@specimen(FAMILY, name="nf_nbeats")
def nf_nbeats() -> Built:
    return Windows(NBEATS(h=HORIZON, input_size=HISTORY, mlp_units=[[16, 16]] * 3, max_steps=1)), windows()


@specimen(FAMILY, name="nf_patchtst")
def nf_patchtst() -> Built:
    model = PatchTST(h=HORIZON, input_size=HISTORY, patch_len=4, stride=4, hidden_size=16, n_heads=2,
                     encoder_layers=2, linear_hidden_size=32, max_steps=1)
    return Windows(model), windows()


@specimen(FAMILY, name="nf_lstm")
def nf_lstm() -> Built:
    model = LSTM(h=HORIZON, input_size=HISTORY, encoder_hidden_size=16, decoder_hidden_size=16, max_steps=1)
    return Windows(model), windows()
