"""The models of a newcomer's trial (issue 31): what the words, the table and the picture must
agree on. Each is small, seeded, and has a real backward the tests compare against."""
from __future__ import annotations

import torch
from torch import nn

HEALTHY_LAYERS = 72  # with the two of the dry branch: 74 Linear layers, 148 parameters


class ManyLayers(nn.Module):
    """148 parameters: a deep healthy stack and a two-layer side branch whose result is detached."""

    def __init__(self) -> None:
        super().__init__()
        self.stack = nn.Sequential(*[nn.Linear(8, 8) for _ in range(HEALTHY_LAYERS)])
        self.side = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))

    def forward(self, x):
        return self.stack(x) + self.side(x).detach()  # plant-side-detach


class ListLayers(nn.Module):
    """Layers kept in a plain Python list: called in forward, reached by the backward, and never
    handed to an optimizer built from model.parameters()."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.blocks = [nn.Linear(8, 8), nn.Linear(8, 8)]  # plant-plain-list
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = torch.relu(block(h))
        return self.head(h)


class BuiltInForward(nn.Module):
    """A layer made inside forward: a fresh, untrained Linear on every call. Its registered twin
    in __init__ is never called."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.embed(x)
        h = nn.Linear(8, 8)(h)  # plant-built-in-forward
        return self.head(h)


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(4, 8),)


def gpt2_detached_block(layers: int = 4, cut_block: int = 1):
    """A tiny-width Hugging Face GPT-2 whose block ``cut_block`` detaches its MLP's output."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

    class DetachedMLP(GPT2MLP):
        def forward(self, hidden_states):
            return super().forward(hidden_states).detach()  # plant-gpt2-detach

    class Gpt2(GPT2LMHeadModel):
        def forward(self, input_ids):
            return super().forward(input_ids=input_ids, use_cache=False).logits

    config = GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=99, n_positions=16, bos_token_id=0,
                        eos_token_id=0)
    torch.manual_seed(0)
    model = Gpt2(config)
    block = model.transformer.h[cut_block]
    planted = DetachedMLP(4 * config.n_embd, config)
    planted.load_state_dict(block.mlp.state_dict())
    block.mlp = planted
    return model


def gpt2_inputs() -> tuple[torch.Tensor]:
    return (torch.randint(0, 99, (2, 8)),)


class SparseArgmaxMoE(nn.Module):
    """Eight argmax-routed experts dispatched sparsely (``if mask.any()``): on one batch some experts
    get no token and are not called at all; over many steps each is used on some of them."""

    def __init__(self, experts: int = 8, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.router = nn.Linear(width, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
                                     for _ in range(experts))
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        h = self.embed(x)
        choice = self.router(h).argmax(-1)  # plant-sparse-argmax
        mixed = torch.zeros_like(h)
        for index, expert in enumerate(self.experts):
            mask = choice == index
            if mask.any():
                mixed[mask] = expert(h[mask])
        return self.head(mixed)


def sparse_moe_inputs() -> tuple[torch.Tensor]:
    torch.manual_seed(3)
    return (torch.randn(1, 3, 16),)


class TiedHead(nn.Module):
    """A language model in miniature whose output head shares the embedding's weight (weight tying,
    as GPT-2's lm_head does): one parameter read at the top and at the bottom of the picture."""

    def __init__(self, vocab: int = 20, width: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.body = nn.Linear(width, width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, ids):
        return self.lm_head(torch.tanh(self.body(self.embed(ids))))


def tied_inputs() -> tuple[torch.Tensor]:
    torch.manual_seed(0)
    return (torch.randint(0, 20, (2, 5)),)
