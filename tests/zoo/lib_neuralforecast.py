"""neuralforecast: its forecasting networks (N-HiTS, N-BEATS, PatchTST, an LSTM encoder-decoder),
each built small from its own constructor (horizon 4, 16 steps of history, width 16), called as its
training step calls them: on a batch of windows (2 series, no exogenous variables)."""
from __future__ import annotations

import torch

from .registry import Built, specimen
from .vision_ops import define_nms_if_missing

define_nms_if_missing()  # neuralforecast imports pytorch_lightning, which may import torchvision
from neuralforecast.models import LSTM, NBEATS, NHITS, PatchTST  # noqa: E402

FAMILY = "neuralforecast"
HORIZON, HISTORY = 4, 16


def windows() -> tuple[dict[str, torch.Tensor | None]]:
    return ({"insample_y": torch.randn(2, HISTORY, 1), "insample_mask": torch.ones(2, HISTORY, 1),
             "futr_exog": None, "hist_exog": None, "stat_exog": None},)


@specimen(FAMILY, name="nf_nhits")
def nf_nhits() -> Built:
    model = NHITS(h=HORIZON, input_size=HISTORY, mlp_units=[[16, 16]] * 3, n_pool_kernel_size=[2, 2, 1],
                  n_freq_downsample=[2, 1, 1], dropout_prob_theta=0.1, max_steps=1)
    return model, windows()


@specimen(FAMILY, name="nf_nbeats")
def nf_nbeats() -> Built:
    return NBEATS(h=HORIZON, input_size=HISTORY, mlp_units=[[16, 16]] * 3, max_steps=1), windows()


@specimen(FAMILY, name="nf_patchtst")
def nf_patchtst() -> Built:
    model = PatchTST(h=HORIZON, input_size=HISTORY, patch_len=4, stride=4, hidden_size=16, n_heads=2,
                     encoder_layers=2, linear_hidden_size=32, max_steps=1)
    return model, windows()


@specimen(FAMILY, name="nf_lstm")
def nf_lstm() -> Built:
    return LSTM(h=HORIZON, input_size=HISTORY, encoder_hidden_size=16, decoder_hidden_size=16, max_steps=1), windows()
