"""Models the benchmark measures: the seed, real architectures at full size, synthetic graphs.

Hugging Face models are built from configs with random weights: nothing is downloaded.
Each builder returns ``(model, inputs)`` where inputs is a tuple of forward's positional args.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import torchvision_env  # noqa: E402,F401  (before transformers, which imports torchvision)


def seed() -> tuple[nn.Module, tuple[Any, ...]]:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from seed import Net

    return Net(), (torch.randn(16, 10),)


class _Logits(nn.Module):
    """Calls a Hugging Face model with keyword inputs and returns its logits/hidden state."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        output = self.model(**dict(zip(self.names, tensors)))
        return output[0]


def gpt2() -> tuple[nn.Module, tuple[Any, ...]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(use_cache=False)), (torch.randint(0, 50257, (1, 128)),)


def bert() -> tuple[nn.Module, tuple[Any, ...]]:
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig()), (torch.randint(0, 30522, (1, 128)),)


def vit() -> tuple[nn.Module, tuple[Any, ...]]:
    from transformers import ViTConfig, ViTModel

    return ViTModel(ViTConfig()), (torch.randn(1, 3, 224, 224),)


def t5() -> tuple[nn.Module, tuple[Any, ...]]:
    from transformers import T5Config, T5ForConditionalGeneration

    model = _Logits(T5ForConditionalGeneration(T5Config(use_cache=False)), ("input_ids", "decoder_input_ids"))
    return model, (torch.randint(0, 32128, (1, 64)), torch.randint(0, 32128, (1, 16)))


def llama_small() -> tuple[nn.Module, tuple[Any, ...]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=8, vocab_size=32000, use_cache=False)
    return LlamaForCausalLM(config), (torch.randint(0, 32000, (1, 128)),)


def llama_7b_config() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, use_cache=False)


def llama_7b_meta() -> tuple[nn.Module, tuple[Any, ...]]:
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(llama_7b_config())
    return model, (torch.randint(0, 32000, (1, 128), device="meta"),)


class Synthetic(nn.Module):
    """A long residual stack of tiny blocks: 4 graph nodes per block."""

    def __init__(self, blocks: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + torch.tanh(layer(x)) * 0.5
        return x


def synthetic(nodes: int = 20_000) -> tuple[nn.Module, tuple[Any, ...]]:
    return Synthetic(nodes // 4), (torch.randn(2, 8),)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[Any, ...]]]] = {
    "seed": seed,
    "gpt2": gpt2,
    "bert": bert,
    "vit": vit,
    "t5": t5,
    "llama-small": llama_small,
    "synthetic-20k": synthetic,
    "llama-7b-meta": llama_7b_meta,
}
