"""The ``torch.nn`` building blocks people train directly: Transformer, TransformerEncoder,
LSTM, GRU and MultiheadAttention, each in the small model it is usually found in."""
from __future__ import annotations

import torch
import torch.nn as nn

from .registry import specimen

VOCAB, TOKENS, WIDTH = 99, 8, 32


class Translator(nn.Module):
    """The standard translation model: embeddings, ``nn.Transformer``, a generator Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.source_embedding = nn.Embedding(VOCAB, WIDTH)
        self.target_embedding = nn.Embedding(VOCAB, WIDTH)
        self.transformer = nn.Transformer(WIDTH, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                          dim_feedforward=64, batch_first=True)
        self.generator = nn.Linear(WIDTH, VOCAB)

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(target.shape[1])
        hidden = self.transformer(self.source_embedding(source), self.target_embedding(target), tgt_mask=mask)
        return self.generator(hidden)


class EncoderClassifier(nn.Module):
    """A ``TransformerEncoder`` over embedded tokens, mean-pooled into a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, nhead=2, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.classifier = nn.Linear(WIDTH, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.encoder(self.embedding(tokens)).mean(dim=1))


class RecurrentTagger(nn.Module):
    """An embedding, a 2-layer bidirectional recurrent network (``nn.LSTM`` or ``nn.GRU``), a tagger."""

    def __init__(self, recurrent: type[nn.RNNBase]) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        self.recurrent = recurrent(WIDTH, WIDTH, num_layers=2, batch_first=True, bidirectional=True, dropout=0.1)
        self.tagger = nn.Linear(2 * WIDTH, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.recurrent(self.embedding(tokens))
        return self.tagger(hidden)


class AttentionPooling(nn.Module):
    """Self-attention with ``nn.MultiheadAttention``, both outputs used: the attended values feed
    the head, the attention weights a second (auxiliary) head."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        self.attention = nn.MultiheadAttention(WIDTH, num_heads=2, batch_first=True)
        self.head = nn.Linear(WIDTH, 3)
        self.weights_head = nn.Linear(TOKENS, 3)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.embedding(tokens)
        attended, weights = self.attention(hidden, hidden, hidden)
        return self.head(attended.mean(dim=1)), self.weights_head(weights.mean(dim=1))


class AttentionWeightsOnly(nn.Module):
    """Only the attention weights of ``nn.MultiheadAttention`` are used: ``out_proj`` never learns."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        self.attention = nn.MultiheadAttention(WIDTH, num_heads=2, batch_first=True)
        self.head = nn.Linear(TOKENS, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embedding(tokens)
        _, weights = self.attention(hidden, hidden, hidden)
        return self.head(weights.mean(dim=1))


def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, TOKENS))


@specimen("torch.nn", name="nn_transformer")
def nn_transformer():
    return Translator(), (tokens(), tokens())


@specimen("torch.nn", name="nn_transformer_encoder")
def nn_transformer_encoder():
    return EncoderClassifier(), (tokens(),)


@specimen("torch.nn", name="nn_lstm")
def nn_lstm():
    return RecurrentTagger(nn.LSTM), (tokens(),)


@specimen("torch.nn", name="nn_gru")
def nn_gru():
    return RecurrentTagger(nn.GRU), (tokens(),)


@specimen("torch.nn", name="nn_multihead_attention")
def nn_multihead_attention():
    return AttentionPooling(), (tokens(),)


@specimen("torch.nn", name="nn_mha_weights_only")
def nn_mha_weights_only():
    return AttentionWeightsOnly(), (tokens(),)
