"""sentence-transformers: embedding models as their trainer optimizes them, each module returning one
of the library's losses on a batch of 2 pairs of 8 tokens: a 2-layer BERT of width 32 under mean
pooling, a dense layer and normalization (multiple-negatives ranking loss; and CoSENT with scores),
and a static embedding bag (ranking loss). Built offline: the BERT is saved from a random config to a
temporary folder with a word-level tokenizer made in memory, and loaded back as the library loads any
local model."""
from __future__ import annotations

import tempfile

import torch
from torch import nn

from .registry import Built, specimen
from .vision_ops import define_nms_if_missing

define_nms_if_missing()  # sentence-transformers imports transformers, which may import torchvision
from sentence_transformers import SentenceTransformer, losses, models  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from tokenizers.models import WordLevel  # noqa: E402
from tokenizers.pre_tokenizers import Whitespace  # noqa: E402
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast  # noqa: E402

FAMILY = "sentence_transformers"
TOKENS, VOCABULARY = 8, 99
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tokenizer() -> Tokenizer:
    vocabulary = {word: index for index, word in enumerate(SPECIAL + [f"w{i}" for i in range(VOCABULARY - len(SPECIAL))])}
    made = Tokenizer(WordLevel(vocabulary, unk_token="[UNK]"))
    made.pre_tokenizer = Whitespace()
    return made


def bert() -> models.Transformer:
    """A random 2-layer BERT, saved and loaded back from a local folder (nothing downloaded)."""
    config = BertConfig(vocab_size=VOCABULARY, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    with tempfile.TemporaryDirectory(prefix="fxflow-zoo-st-") as folder:
        BertModel(config).save_pretrained(folder)
        PreTrainedTokenizerFast(tokenizer_object=tokenizer(), pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
        return models.Transformer(folder, max_seq_length=TOKENS)


def features() -> dict[str, torch.Tensor]:
    ids = torch.randint(len(SPECIAL), VOCABULARY, (2, TOKENS))
    mask = torch.ones(2, TOKENS, dtype=torch.long)
    mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def embedder() -> SentenceTransformer:
    transformer = bert()
    pooling = models.Pooling(32, pooling_mode="mean")  # the BERT's width
    dense = models.Dense(in_features=32, out_features=16, activation_function=nn.Tanh())
    return SentenceTransformer(modules=[transformer, pooling, dense, models.Normalize()], device="cpu")


@specimen(FAMILY, name="st_ranking")
def st_ranking() -> Built:
    return losses.MultipleNegativesRankingLoss(embedder()), ([features(), features()], None)


@specimen(FAMILY, name="st_cosent")
def st_cosent() -> Built:
    return losses.CoSENTLoss(embedder()), ([features(), features()], torch.tensor([0.9, 0.1]))


@specimen(FAMILY, name="st_static")
def st_static() -> Built:
    model = SentenceTransformer(modules=[models.StaticEmbedding(tokenizer(), embedding_dim=16)], device="cpu")
    ids = [torch.randint(len(SPECIAL), VOCABULARY, (12,)) for _ in range(2)]
    bag = {"input_ids": torch.cat(ids), "offsets": torch.tensor([0, 5])}
    return losses.MultipleNegativesRankingLoss(model), ([bag, dict(bag, offsets=torch.tensor([0, 7]))], None)
