"""A Hugging Face LLaMA subclass with a planted bug: the embeddings run under ``no_grad``.

Built from a tiny config with random weights (no download). Run:
``HF_HUB_OFFLINE=1 fxflow check examples/hf_planted_cut.py:FrozenEmbeddingsLlama``
(add ``--device meta`` to check without allocating weights).
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def tiny_config() -> LlamaConfig:
    return LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)


class FrozenEmbeddingsLlama(LlamaForCausalLM):
    def __init__(self, config: LlamaConfig | None = None):
        super().__init__(config or tiny_config())

    def forward(self, input_ids):
        with torch.no_grad():  # the bug: "embeddings are pretrained, no need for gradients"
            embeds = self.model.embed_tokens(input_ids)
        return super().forward(inputs_embeds=embeds, use_cache=False).logits


def example_inputs():
    return torch.randint(0, 99, (2, 8))
