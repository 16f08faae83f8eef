"""Models that showed the render and wording defects of issue 21 and 17.13, built tiny and offline.

Each is the smallest model that shows one defect; the tests in ``test_render_truth.py`` compare
what the picture and the words say with a real backward of the same model.
"""
from __future__ import annotations

import os

import torch
import torch.nn as nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from .dead_relu import DeadRelu  # noqa: E402,F401  (re-exported: one of this file's models)


class Heads(nn.Module):
    """A ModuleDict of heads of which forward calls one: the others are never called."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.heads = nn.ModuleDict({"cls": nn.Linear(8, 2), "reg": nn.Linear(8, 1), "aux": nn.Linear(8, 3)})

    def forward(self, x):
        return self.heads["cls"](torch.relu(self.body(x)))


class ArgmaxMoE(nn.Module):
    """An argmax-routed mixture of experts: a router picks one expert per token (the argmax cuts
    the router off), every expert runs on its tokens, the outputs are summed. Sixteen experts side
    by side make the wide fan-out that must still fit one screen."""

    def __init__(self, experts: int = 16, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.router = nn.Linear(width, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
                                     for _ in range(experts))
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        h = self.embed(x)
        choice = self.router(h).argmax(-1)
        mixed = torch.zeros_like(h)
        for index, expert in enumerate(self.experts):
            mixed = mixed + expert(h) * (choice == index).unsqueeze(-1).to(h.dtype)
        return self.head(mixed)


def late_cut_gpt2(layers: int = 12):
    """A GPT-2 (tiny width) whose transformer output is detached before the head: every block is
    dry, so the focused paths from the dry parameters to the cut run through the whole stack."""
    from transformers import GPT2Config, GPT2LMHeadModel

    class LateCutGpt2(GPT2LMHeadModel):
        def forward(self, input_ids):
            hidden = self.transformer(input_ids=input_ids, use_cache=False).last_hidden_state
            return self.lm_head(hidden.detach())

    config = GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=99, n_positions=16, bos_token_id=0,
                        eos_token_id=0)
    torch.manual_seed(0)
    return LateCutGpt2(config)


class ManyBranches(nn.Module):
    """Twenty-four parallel branches that are plain attributes, not a ModuleList: nothing folds,
    so only wrapping the wide rank into rows keeps the picture one screen wide."""

    def __init__(self, branches: int = 24) -> None:
        super().__init__()
        for index in range(branches):
            setattr(self, f"branch_{index}", nn.Linear(8, 8))
        self.branches = branches

    def forward(self, x):
        return sum(getattr(self, f"branch_{index}")(x) for index in range(self.branches))
