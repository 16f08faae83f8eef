"""One small model per cause of a missing gradient, and models that must NOT be flagged.

Every model has a layer ``a`` whose path is (or is not) cut at the line marked ``# plant``
(or ``# plant-<name>``) and a healthy layer ``b``. The tests find planted lines by their
marker, never by number.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn

N, D = 5, 6


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(D, D)
        self.b = nn.Linear(D, D)


# -- cuts --------------------------------------------------------------------------------------
class Detach(Pair):
    def forward(self, x):
        h = self.a(x).detach()  # plant-detach
        return self.b(x) + h


class DetachInPlace(Pair):
    def forward(self, x):
        h = torch.tanh(self.a(x))
        h.detach_()  # plant-detach_
        return self.b(x) + h


class Data(Pair):
    def forward(self, x):
        h = self.a(x).data  # plant-data
        return self.b(x) * h


class Item(Pair):
    def forward(self, x):
        scale = self.a(x).mean().item()  # plant-item
        return self.b(x) * torch.tensor(scale)


class Tolist(Pair):
    def forward(self, x):
        values = self.a(x).tolist()  # plant-tolist
        return self.b(x) + torch.tensor(values)


class Compare(Pair):
    def forward(self, x):
        gate = (self.a(x) > 0).float()  # plant-gt
        return self.b(x) * gate


def _index(op: str) -> type:
    class Index(Pair):
        def forward(self, x):
            order = getattr(self.a(x), op)(dim=-1)  # plant-index
            return torch.gather(self.b(x), 1, order.reshape(N, -1)[:, :1])

    Index.__name__ = Index.__qualname__ = f"Index_{op}"
    return Index


Argmax, Argmin, Argsort = _index("argmax"), _index("argmin"), _index("argsort")


class CastLong(Pair):
    def forward(self, x):
        k = self.a(x).long()  # plant-to_int64
        return self.b(x) + k


class CastBool(Pair):
    def forward(self, x):
        keep = self.a(x).to(torch.bool)  # plant-to_bool
        return self.b(x) * keep


class CastInt(Pair):
    def forward(self, x):
        k = self.a(x).int()  # plant-to_int32
        return self.b(x) - k


class WhereCondition(Pair):
    def forward(self, x):
        return torch.where(self.a(x) > 0, self.b(x), x)  # plant-where


class MaskedFill(Pair):
    def forward(self, x):
        return self.b(x).masked_fill(self.a(x) < 0, 0.0)  # plant-mask


class BoolIndex(Pair):
    def forward(self, x):
        picked = self.b(x)[self.a(x) >= 0]  # plant-boolindex
        return picked.sum() + self.b(x).sum()


class IndexSelect(Pair):
    def forward(self, x):
        rows = self.a(x).sum(-1).argsort()  # plant-argsort
        return torch.index_select(self.b(x), 0, rows)


class NoGrad(Pair):
    def forward(self, x):
        with torch.no_grad():  # plant-no_grad
            h = self.a(x)
        return self.b(x) + h


class InferenceMode(Pair):
    def forward(self, x):
        with torch.inference_mode():  # plant-inference_mode
            h = self.a(x)
        return self.b(x) + h.clone()


class GradDisabled(Pair):
    def forward(self, x):
        with torch.set_grad_enabled(False):  # plant-set_grad_enabled
            h = torch.relu(self.a(x))
        return self.b(x) + h


class _Frozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(D, D)

    def forward(self, x):
        with torch.no_grad():  # plant-submodule
            return self.inner(x)


class NoGradSubmodule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = _Frozen()
        self.b = nn.Linear(D, D)

    def forward(self, x):
        return self.b(self.a(x))


def _zero(op: str) -> type:
    class Zero(Pair):
        def forward(self, x):
            h = getattr(torch, op)(self.a(x))  # plant-zero
            return self.b(x) + h

    Zero.__name__ = Zero.__qualname__ = f"Zero_{op}"
    return Zero


Round, Floor, Ceil, Trunc, Sign = (_zero(op) for op in ("round", "floor", "ceil", "trunc", "sign"))


class Unused(Pair):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Linear(D, D)  # defined, never called

    def forward(self, x):
        return self.b(x) + self.a(x)


class Discarded(Pair):
    def forward(self, x):
        self.a(x)  # result thrown away
        return self.b(x)


class Frozen(Pair):
    def __init__(self) -> None:
        super().__init__()
        self.a.requires_grad_(False)

    def forward(self, x):
        return self.b(self.a(x))


class TwoCutsInParallel(Pair):
    def forward(self, x):
        h = self.a(x)
        left = h.detach()  # plant-left
        right = (h > 0).float()  # plant-right
        return self.b(x) + left + right


# -- not cuts: must stay reachable -------------------------------------------------------------
class StraightThrough(Pair):
    def forward(self, x):
        z = self.a(x)
        q = torch.round(z)
        return self.b(z + (q - z).detach())


class TiedWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, D)
        self.head = nn.Linear(D, 11, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.embed(tokens)))


class ResidualAroundDetach(Pair):
    def forward(self, x):
        h = self.a(x)
        return self.b(h) + h.detach()


class DetachAfterUse(Pair):
    def forward(self, x):
        h = torch.tanh(self.a(x))
        early = h * 2
        h.detach_()
        return self.b(x) + early + h


class SharedLayer(Pair):
    def forward(self, x):
        return self.b(self.a(self.a(x))) + self.a(x).detach()


# -- multiple outputs --------------------------------------------------------------------------
class TupleOut(Pair):
    def forward(self, x):
        return self.a(x).detach(), self.b(x)  # plant-tuple


class DictOut(Pair):
    def forward(self, x):
        return {"kept": self.b(x), "dropped": (self.a(x) > 0)}  # plant-dict


@dataclass
class Output:
    logits: torch.Tensor
    hidden: Any = None


class DataclassOut(Pair):
    def forward(self, x):
        return Output(logits=self.b(x), hidden=self.a(x).argmax(-1))  # plant-dataclass


@dataclass
class ModelOutput(OrderedDict):
    """Like transformers' ModelOutput: a dataclass that is also an ordered dict."""

    logits: torch.Tensor = None
    hidden_states: torch.Tensor = None

    def __post_init__(self) -> None:
        for name in ("logits", "hidden_states"):
            if getattr(self, name) is not None:
                self[name] = getattr(self, name)


class ModelOutputOut(Pair):
    def forward(self, x):
        return ModelOutput(logits=self.b(x), hidden_states=torch.sign(self.a(x)))  # plant-modeloutput


class DataclassAllLive(Pair):
    def forward(self, x):
        return Output(logits=self.b(x), hidden=self.a(x))


def float_input() -> tuple[torch.Tensor]:
    return (torch.randn(N, D),)


def token_input() -> tuple[torch.Tensor]:
    return (torch.randint(0, 11, (N, 3)),)


@dataclass
class Case:
    """A model, what its layer ``a`` should get, and the ops and marker that should explain it."""

    model: Callable[[], nn.Module]
    a_verdict: str  # static verdict of every a.* parameter (b.* is always reachable)
    ops: tuple[str, ...] = ()  # cut_by op names for a.*
    markers: tuple[str, ...] = ()  # planted lines cut_by sources must name
    inputs: Callable[[], tuple] = float_input
    prefix: str = "a."

    @property
    def name(self) -> str:
        return self.model.__name__


CUT_CASES = [
    Case(Detach, "cut", ("detach",), ("plant-detach",)),
    Case(DetachInPlace, "cut", ("detach_",), ("plant-detach_",)),
    Case(Data, "cut", ("data",), ("plant-data",)),
    Case(Item, "cut", ("item",), ("plant-item",)),
    Case(Tolist, "cut", ("tolist",), ("plant-tolist",)),
    Case(Compare, "cut", ("gt",), ("plant-gt",)),
    Case(Argmax, "cut", ("argmax",), ("plant-index",)),
    Case(Argmin, "cut", ("argmin",), ("plant-index",)),
    Case(Argsort, "cut", ("argsort",), ("plant-index",)),
    Case(CastLong, "cut", ("to_int64",), ("plant-to_int64",)),
    Case(CastBool, "cut", ("to_bool",), ("plant-to_bool",)),
    Case(CastInt, "cut", ("to_int32",), ("plant-to_int32",)),
    Case(WhereCondition, "cut", ("gt",), ("plant-where",)),
    Case(MaskedFill, "cut", ("lt",), ("plant-mask",)),
    Case(BoolIndex, "cut", ("ge",), ("plant-boolindex",)),
    Case(IndexSelect, "cut", ("argsort",), ("plant-argsort",)),
    Case(NoGrad, "cut", ("no_grad",), ("plant-no_grad",)),
    Case(InferenceMode, "cut", ("inference_mode",), ("plant-inference_mode",)),
    Case(GradDisabled, "cut", ("no_grad",), ("plant-set_grad_enabled",)),
    Case(NoGradSubmodule, "cut", ("no_grad",), ("plant-submodule",)),
    Case(TwoCutsInParallel, "cut", ("detach", "gt"), ("plant-left", "plant-right")),
    Case(TupleOut, "cut", ("detach",), ("plant-tuple",)),
    Case(DictOut, "cut", ("gt",), ("plant-dict",)),
    Case(DataclassOut, "cut", ("argmax",), ("plant-dataclass",)),
]
ZERO_CASES = [Case(cls, "zero", (cls.__name__.split("_")[1],), ("plant-zero",)) for cls in (Round, Floor, Ceil, Trunc, Sign)]
ZERO_CASES.append(Case(ModelOutputOut, "zero", ("sign",), ("plant-modeloutput",)))
OTHER_CASES = [
    Case(Unused, "unused", prefix="c."), Case(Discarded, "unused"), Case(Frozen, "frozen"),
    Case(StraightThrough, "reachable"), Case(ResidualAroundDetach, "reachable"),
    Case(DetachAfterUse, "reachable"), Case(SharedLayer, "reachable"), Case(DataclassAllLive, "reachable"),
    Case(TiedWeights, "reachable", inputs=token_input, prefix="embed."),
]
ALL_CASES = CUT_CASES + ZERO_CASES + OTHER_CASES
