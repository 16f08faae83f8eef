"""A dict of inputs reaches forward as ``model(**inputs)`` would, including keys that forward
takes only through ``**kwargs`` (FNet's ``attention_mask``)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import fxflow
from fxflow.errors import FxflowError
from gradtruth import assert_agrees, real_grads


class TakesKwargs(nn.Module):
    """Like FNet: named inputs, then ``**kwargs`` that swallows the tokenizer's extra keys."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 3)
        self.gate = nn.Linear(8, 1)

    def forward(self, input_ids=None, position_ids=None, **kwargs):
        h = self.embed(input_ids)
        mask = kwargs.get("attention_mask")
        if mask is not None:
            h = h * mask.unsqueeze(-1)
        if kwargs.get("use_gate", False):
            h = h * torch.sigmoid(self.gate(h))
        return self.head(h)


def _inputs(use_gate: bool) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(0, 10, (2, 5), generator=generator),
            "attention_mask": torch.ones(2, 5), "use_gate": use_gate}


@pytest.mark.parametrize("use_gate", [False, True])
def test_keywords_only_kwargs_takes_are_passed_as_keywords(use_gate):
    model = TakesKwargs()
    inputs = _inputs(use_gate)
    report = fxflow.check(model, inputs)
    assert report.trace.method != "none"
    gate = report.parameter("gate.weight")
    assert gate.static == ("reachable" if use_gate else "unused")
    assert gate.dynamic == ("ok" if use_gate else "missing")
    assert [p.name for p in report.parameters] == [name for name, _ in model.named_parameters()]

    assert_agrees(report, real_grads(model, (), inputs))


def test_a_key_forward_cannot_take_fails_clearly():
    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 2)

        def forward(self, x):
            return self.a(x)

    with pytest.raises(FxflowError, match="no positional argument 'attention_mask'"):
        fxflow.check(Plain(), {"x": torch.randn(2, 4), "attention_mask": torch.ones(2)})


def test_fnet_from_a_tiny_config_checks_with_the_tokenizer_keys():
    transformers = pytest.importorskip("transformers")
    config = transformers.FNetConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, intermediate_size=32,
                                     max_position_embeddings=16, type_vocab_size=2)
    torch.manual_seed(0)
    model = transformers.FNetModel(config)
    inputs = {"input_ids": torch.randint(0, 50, (2, 6)), "token_type_ids": torch.zeros(2, 6, dtype=torch.long),
              "attention_mask": torch.ones(2, 6, dtype=torch.long)}
    report = fxflow.check(model, inputs)
    assert report.trace.method != "none"
    assert_agrees(report, real_grads(model, (), inputs))


def test_example_inputs_returning_a_dict_with_kwargs_keys_via_the_cli(run_fxflow, write_model, tmp_path):
    pytest.importorskip("transformers")
    path = write_model(tmp_path, """
        import torch
        import transformers

        def build():
            torch.manual_seed(0)
            config = transformers.FNetConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                             intermediate_size=32, max_position_embeddings=16, type_vocab_size=2)
            return transformers.FNetModel(config)

        def example_inputs():
            return {"input_ids": torch.randint(0, 50, (2, 6)), "attention_mask": torch.ones(2, 6, dtype=torch.long)}
    """)
    code, out, err = run_fxflow("check", f"{path}:build", "--json", env={"HF_HUB_OFFLINE": "1"})
    assert code == 0, err
    import json

    data = json.loads(out)
    assert data["trace"]["method"] != "none"
    assert all(p["agree"] for p in data["parameters"])
