"""x-transformers: its wrappers (a decoder language model with its autoregressive loss, an encoder,
an encoder-decoder, a ViT, a continuous-input transformer), each built small from its own
constructor: width 32, 2 layers, 2 heads, vocabulary 99, 2 x 8 tokens."""
from __future__ import annotations

import torch
from x_transformers import (AutoregressiveWrapper, ContinuousTransformerWrapper, Decoder, Encoder,
                            TransformerWrapper, ViTransformerWrapper, XTransformer)

from .registry import Built, specimen

FAMILY = "x_transformers"
TOKENS, VOCABULARY = 8, 99
LAYERS = dict(dim=32, depth=2, heads=2, attn_dim_head=16)


def tokens(length: int = TOKENS) -> torch.Tensor:
    return torch.randint(0, VOCABULARY, (2, length))


@specimen(FAMILY, name="xt_decoder_lm")
def xt_decoder_lm() -> Built:
    model = TransformerWrapper(num_tokens=VOCABULARY, max_seq_len=16, attn_layers=Decoder(**LAYERS, rotary_pos_emb=True))
    return AutoregressiveWrapper(model), (tokens(TOKENS + 1),)


@specimen(FAMILY, name="xt_encoder")
def xt_encoder() -> Built:
    model = TransformerWrapper(num_tokens=VOCABULARY, max_seq_len=16, emb_dropout=0.1,
                               attn_layers=Encoder(**LAYERS, attn_dropout=0.1, ff_dropout=0.1, ff_glu=True))
    return model, (tokens(),)


@specimen(FAMILY, name="xt_encoder_decoder")
def xt_encoder_decoder() -> Built:
    model = XTransformer(dim=32, enc_num_tokens=VOCABULARY, enc_depth=2, enc_heads=2, enc_max_seq_len=16,
                         dec_num_tokens=VOCABULARY, dec_depth=2, dec_heads=2, dec_max_seq_len=16)
    return model, (tokens(), tokens(TOKENS + 1))


@specimen(FAMILY, name="xt_vit")
def xt_vit() -> Built:
    model = ViTransformerWrapper(image_size=32, patch_size=8, num_classes=4, attn_layers=Encoder(**LAYERS))
    return model, (torch.randn(2, 3, 32, 32),)


@specimen(FAMILY, name="xt_continuous")
def xt_continuous() -> Built:
    model = ContinuousTransformerWrapper(dim_in=16, dim_out=8, max_seq_len=16,
                                         attn_layers=Decoder(**LAYERS, use_rmsnorm=True))
    return model, (torch.randn(2, TOKENS, 16),)
