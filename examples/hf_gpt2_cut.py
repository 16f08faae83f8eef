"""A 12-layer Hugging Face GPT-2 with one planted cut: block 5's MLP output is detached.

Built from a tiny config with random weights (no download). The picture's default view keeps the
cut and the dry MLP in full detail and folds the eleven healthy blocks. Run:
``HF_HUB_OFFLINE=1 fxflow render examples/hf_gpt2_cut.py:DetachedMlpGpt2 -o gpt2.png``
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP  # noqa: E402

CUT_BLOCK = 5


def tiny_config() -> GPT2Config:
    return GPT2Config(n_layer=12, n_embd=32, n_head=2, vocab_size=99, n_positions=16, bos_token_id=0, eos_token_id=0)


class DetachedMLP(GPT2MLP):
    def forward(self, hidden_states):
        return super().forward(hidden_states).detach()  # the bug: this block's MLP never learns


class DetachedMlpGpt2(GPT2LMHeadModel):
    def __init__(self, config: GPT2Config | None = None):
        config = config or tiny_config()
        super().__init__(config)
        block = self.transformer.h[CUT_BLOCK]
        planted = DetachedMLP(4 * config.n_embd, config)
        planted.load_state_dict(block.mlp.state_dict())
        block.mlp = planted

    def forward(self, input_ids):
        return super().forward(input_ids=input_ids, use_cache=False).logits


def example_inputs():
    return torch.randint(0, 99, (2, 8))
