"""Write random model source with planted cuts at known lines, and predict what fxflow should say.

A model is a random DAG over values of shape (N, D): Linear / Conv1d / Embedding / LayerNorm
layers, activations, residual adds, products, concatenations, shared (re-called) layers, and
planted cuts of every kind issue 2 lists, each on its own line. Alongside the source the
generator tracks, per value, which layers reach it and how:

* ``wet``:  some path carries a real gradient;
* ``zero``: layer -> lines of the zero-derivative ops that every live path crosses first;
* ``cut``:  layer -> lines of the first cut on each path (no live path left).

The prediction is only used to check *where* fxflow attributes cuts; whether a parameter gets a
gradient at all is always checked against a real backward, never against this prediction.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

N, D, V = 4, 8, 13

CUT_KINDS = ("detach", "detach_", "data", "item", "tolist", "compare", "argmax", "argmin", "argsort",
             "max_indices", "topk_indices",  # the index output of a multi-output op (issue 17)
             "cast_long", "cast_bool", "cast_int", "where", "masked_fill", "bool_index",
             "no_grad", "inference_mode", "set_grad_enabled")
ZERO_KINDS = ("round", "floor", "ceil", "trunc", "sign")
# in-place writes through views (issue 10): the written value must reach later reads of the base
VIEW_WRITES = ("slice_set", "narrow_add", "masked_set", "index_put", "copy_into", "inplace_act")
# calls with several outputs of which one is used (issue 10): flow per output, not per call
MULTI_OUTPUTS = ("mha_weights", "lstm_hidden")
ACTIVATIONS = ("torch.relu", "torch.tanh", "torch.sigmoid", "nn.functional.gelu", "nn.functional.leaky_relu")


@dataclass
class Value:
    """What reaches one generated variable, path by path.

    ``wet``: layers with a path carrying a real gradient. ``zero``: layer -> first zero-derivative
    line on each live path that crosses one. ``cut``: layer -> first cut line on each dead path.
    A layer can be in all three: a later cut of the value kills its live paths too, and then
    every first cut counts (fxflow names the first cut on each path).
    """

    name: str
    wet: set[str] = field(default_factory=set)
    zero: dict[str, set[int]] = field(default_factory=dict)
    cut: dict[str, set[int]] = field(default_factory=dict)


def _merge(target: dict[str, set[int]], source: dict[str, set[int]]) -> None:
    for layer, lines in source.items():
        target.setdefault(layer, set()).update(lines)


def combine(name: str, *values: Value) -> Value:
    """A differentiable op of several values: every path of every operand goes on."""
    result = Value(name)
    for value in values:
        result.wet |= value.wet
        _merge(result.zero, value.zero)
        _merge(result.cut, value.cut)
    return result


def cut(value: Value, line: int) -> Value:
    """The value after a cut at ``line``: every live path dies there; dead ones keep their first cut."""
    result = Value(value.name)
    _merge(result.cut, value.cut)
    for layer in value.wet | set(value.zero):
        result.cut.setdefault(layer, set()).add(line)
    return result


def zero(value: Value, line: int) -> Value:
    """The value after a zero-derivative op at ``line``: wet paths now cross a zero there."""
    result = Value(value.name)
    _merge(result.zero, value.zero)
    _merge(result.cut, value.cut)
    for layer in value.wet:
        result.zero.setdefault(layer, set()).add(line)
    return result


@dataclass
class Generated:
    """A generated model file and the generator's prediction."""

    source: str
    layers: dict[str, str]  # layer attribute -> constructor source
    frozen: set[str]
    output: Value  # what reaches the outputs, all together
    planted: dict[int, str]  # line -> kind of every planted cut / zero op
    unused_params: set[str] = field(default_factory=set)  # parameters only a discarded output needs
    idioms: dict[int, str] = field(default_factory=dict)  # line -> view write / multi-output kind there


class _Writer:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.values: list[Value] = []
        self.layers: dict[str, str] = {}
        self.kinds: dict[str, str] = {}  # layer -> "linear", "conv", ...
        self.planted: dict[int, str] = {}
        self.unused_params: set[str] = set()
        self.idioms: dict[int, str] = {}  # body line -> VIEW_WRITES / MULTI_OUTPUTS kind
        self.counter = 0
        self.header_lines = 0  # set once the header is known

    def fresh(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def emit(self, text: str) -> int:
        self.lines.append(" " * 8 + text)
        return len(self.lines)  # body-relative line, shifted later

    def pick(self) -> Value:
        # favour recent values so chains get deep
        index = min(len(self.values) - 1, int(abs(self.rng.gauss(0, 3))))
        return self.values[-1 - index]

    def layer(self, kind: str) -> str:
        name = f"{'p' if kind == 'vector' else kind[0]}{len(self.layers)}"  # never v<i>: values are
        self.layers[name] = {
            "linear": "nn.Linear(D, D)", "mix": "nn.Linear(2 * D, D)", "conv": "nn.Conv1d(1, 1, 3, padding=1)",
            "norm": "nn.LayerNorm(D)", "embed": "nn.Embedding(V, D)", "vector": "nn.Parameter(torch.randn(D))",
            "mha": "nn.MultiheadAttention(D, 2, batch_first=True)", "lstm": "nn.LSTM(D, D)",
        }[kind]
        self.kinds[name] = kind
        return name


def _step(w: _Writer, mark: list) -> None:
    """Append one random statement."""
    rng = w.rng
    choice = rng.choices(("layer", "shared", "combine", "cut", "zero", "embed", "discard", "ste", "view", "multi"),
                         (30, 6, 18, 22, 6, 4, 3, 3, 10, 4))[0]
    new = w.fresh()
    if choice == "layer" or (choice == "shared" and not any(k == "linear" for k in w.kinds.values())):
        value = w.pick()
        kind = rng.choice(("linear", "linear", "conv", "norm"))
        name = w.layer(kind)
        call = f"self.{name}({value.name}.unsqueeze(1)).squeeze(1)" if kind == "conv" else f"self.{name}({value.name})"
        if rng.random() < 0.6:
            call = f"{rng.choice(ACTIVATIONS)}({call})"
        w.emit(f"{new} = {call}")
        result = combine(new, value)
        result.wet.add(name)
    elif choice == "shared":
        value = w.pick()
        name = rng.choice(sorted(k for k, kind in w.kinds.items() if kind == "linear"))
        w.emit(f"{new} = self.{name}({value.name})")
        result = combine(new, value)
        result.wet.add(name)
    elif choice == "embed":
        name = w.layer("embed")
        w.emit(f"{new} = self.{name}(t)")
        result = Value(new, wet={name})
    elif choice == "discard":
        value = w.pick()
        name = w.layer("linear")
        w.emit(f"self.{name}({value.name})")
        return
    elif choice == "combine":
        a, b = w.pick(), rng.choice(w.values)
        how = rng.choice(("add", "mul", "cat"))
        if how == "cat":
            name = w.layer("mix")
            w.emit(f"{new} = self.{name}(torch.cat([{a.name}, {b.name}], dim=-1))")
            result = combine(new, a, b)
            result.wet.add(name)
        else:
            w.emit(f"{new} = {a.name} {'+' if how == 'add' else '*'} {b.name}")
            result = combine(new, a, b)
    elif choice == "ste":  # straight-through estimator: the detach leaves the identity path open
        value = w.pick()
        line = w.emit(f"{new} = {value.name} + (torch.round({value.name}) - {value.name}).detach()")
        mark.append((line, "ste"))  # the detach is the first cut on the rounded path, if all else dies
        result = combine(new, value, cut(combine(new, zero(value, line), value), line))
    elif choice == "zero":
        value = w.pick()
        op = rng.choice(ZERO_KINDS)
        line = w.emit(f"{new} = torch.{op}({value.name})")
        mark.append((line, op))
        result = zero(value, line)
        result.name = new
    elif choice == "view":
        result = _view_write(w, new, rng.choice(VIEW_WRITES), mark)
    elif choice == "multi":
        result = _multi_output(w, new, rng.choice(MULTI_OUTPUTS), mark)
    else:
        result = _plant_cut(w, new, rng.choice(CUT_KINDS), mark)
    w.values.append(result)


def _view_write(w: _Writer, new: str, kind: str, mark: list) -> Value:
    """A value built by writing into a view of a buffer (or of a copy of a value) in place."""
    a, b = w.pick(), w.rng.choice(w.values)
    layer = w.layer("vector" if kind == "masked_set" else "linear")
    buffer = None  # the line of a zeros buffer taking a's shape, where one is made
    if kind == "slice_set":
        buffer = _zeros_buffer(w, new, f"{a.name}.new_zeros(N, D)", mark)
        line = w.emit(f"{new}[:, :D // 2] = self.{layer}({a.name})[:, :D // 2]")
    elif kind == "narrow_add":
        w.emit(f"{new} = self.{layer}({a.name})")
        line = w.emit(f"{new}.narrow(1, 0, D // 2).add_({b.name}[:, :D // 2])")
        w.idioms[line] = kind
        return _with(combine(new, a, b), layer)
    elif kind == "masked_set":  # SpecAugment: rows picked by a mask get a learned vector
        w.emit(f"{new} = {a.name}.clone()")
        line = w.emit(f"{new}[{b.name}[:, 0] > 0] = self.{layer}")
        mark.append((line, kind))  # the comparison cuts b's paths
        w.idioms[line] = kind
        return _with(combine(new, a, cut(b, line)), layer)
    elif kind == "index_put":
        buffer = _zeros_buffer(w, new, f"{a.name}.new_zeros(N, D)", mark)
        line = w.emit(f"{new}.index_put_((torch.arange(0, N, 2),), self.{layer}({a.name})[::2])")
    elif kind == "copy_into":
        buffer = _zeros_buffer(w, new, f"torch.zeros_like({a.name})", mark)
        line = w.emit(f"{new}.copy_(self.{layer}({a.name}))")
    else:  # an in-place activation on a slice of a fresh layer output; the whole output is read
        w.emit(f"{new} = self.{layer}({a.name})")
        act = w.rng.choice(("torch.relu_({v})", "nn.functional.leaky_relu({v}, inplace=True)",
                            "nn.functional.dropout({v}, 0.5, self.training, True)"))
        line = w.emit(act.format(v=f"{new}[:, 1:]"))
    w.idioms[line] = kind
    result = _with(combine(new, a), layer)
    return combine(new, result, cut(a, buffer)) if buffer else result


def _zeros_buffer(w: _Writer, new: str, factory: str, mark: list) -> int:
    """``new = a.new_zeros(...)``: a buffer that takes only ``a``'s shape, so ``a``'s value stops here
    (fxflow names this line as the first cut on that path, as it names a ``zeros_like``)."""
    line = w.emit(f"{new} = {factory}")
    mark.append((line, "zeros_buffer"))
    return line


def _multi_output(w: _Writer, new: str, kind: str, mark: list) -> Value:
    """One element of a module's tuple output is used; the other's parameters stay unused."""
    a, b = w.pick(), w.rng.choice(w.values)
    if kind == "mha_weights":  # (output, weights): only the weights, so out_proj and the values are unused
        layer = w.layer("mha")
        call = f"self.{layer}({a.name}.unsqueeze(0), {a.name}.unsqueeze(0), {b.name}.unsqueeze(0))"
        line = w.emit(f"{new} = {a.name} * {call}[1].squeeze(0).sum(-1, keepdim=True)")
        w.unused_params |= {f"{layer}.out_proj.weight", f"{layer}.out_proj.bias"}
        w.idioms[line] = kind
        return _with(combine(new, a), layer)
    layer = w.layer("lstm")  # (output, (h_n, c_n)): h_n only
    line = w.emit(f"{new} = {a.name} + self.{layer}({a.name}.unsqueeze(0))[1][0].squeeze(0)")
    w.idioms[line] = kind
    # One step from the zero initial state: weight_hh multiplies h0 = 0, so its derivative is zero
    # whatever the values (a real backward and any number of optimizer steps give it exact zeros).
    mark.append((line, kind))
    recurrent = zero(Value(new, wet={f"{layer}.weight_hh_l0"}), line)
    return _with(combine(new, a, recurrent), layer)


def _with(value: Value, layer: str) -> Value:
    value.wet.add(layer)
    return value


def _plant_cut(w: _Writer, new: str, kind: str, mark: list) -> Value:
    """One planted cut of ``kind`` on a random value; other operands stay differentiable."""
    victim, other = w.pick(), w.rng.choice(w.values)
    v, o = victim.name, other.name
    simple = {
        "detach": f"{new} = {v}.detach()",
        "data": f"{new} = {v}.data",
        "item": f"{new} = {o} * {v}.mean().item()",
        "tolist": f"{new} = {o} + torch.tensor({v}.tolist())",
        "compare": f"{new} = {o} * ({v} > 0).float()",
        "argmax": f"{new} = torch.gather({o}, 1, {v}.argmax(-1, keepdim=True).expand(-1, D))",
        "argmin": f"{new} = torch.gather({o}, 1, {v}.argmin(-1, keepdim=True).expand(-1, D))",
        "argsort": f"{new} = torch.gather({o}, 1, {v}.argsort(-1))",
        "max_indices": f"{new} = torch.gather({o}, 1, {v}.max(-1, keepdim=True)[1].expand(-1, D))",
        "topk_indices": f"{new} = torch.gather({o}, 1, torch.topk({v}, D, -1)[1])",
        "cast_long": f"{new} = {o} + {v}.long()",
        "cast_bool": f"{new} = {o} * {v}.to(torch.bool)",
        "cast_int": f"{new} = {o} - {v}.int()",
        "where": f"{new} = torch.where({v} > 0, {o}, {o} * 0.5)",
        "masked_fill": f"{new} = {o}.masked_fill({v} < 0, 0.0)",
        "bool_index": f"{new} = {o} + {o}[{v} > 0].sum()",
    }
    keeps_other = kind in ("item", "tolist", "compare", "argmax", "argmin", "argsort", "max_indices", "topk_indices",
                           "cast_long",
                           "cast_bool", "cast_int", "where", "masked_fill", "bool_index")
    if kind in simple:
        line = w.emit(simple[kind])
        mark.append((line, kind))
        result = cut(victim, line)
        return combine(new, result, other) if keeps_other else Value(new, cut=result.cut)
    if kind == "detach_":
        w.emit(f"{new} = torch.tanh({v})")
        line = w.emit(f"{new}.detach_()")
        mark.append((line, kind))
        return Value(new, cut=cut(victim, line).cut)
    # grad-mode blocks: the planted line is the `with` line that enters the region (issue 29)
    context = {"no_grad": "torch.no_grad()", "inference_mode": "torch.inference_mode()",
               "set_grad_enabled": "torch.set_grad_enabled(False)"}[kind]
    line = w.emit(f"with {context}:")
    inner_layer = w.layer("linear") if w.rng.random() < 0.5 else None
    call = f"self.{inner_layer}({v})" if inner_layer else f"torch.tanh({v})"
    w.emit(f"    {new} = {call}")
    mark.append((line, kind))
    if kind == "inference_mode":
        w.emit(f"{new} = {new}.clone()")  # inference tensors cannot be saved for backward later
    dead = Value(new, wet=set(victim.wet) | ({inner_layer} if inner_layer else set()),
                 zero=victim.zero, cut=victim.cut)
    return Value(new, cut=cut(dead, line).cut)


HEADER = '''"""Generated by tests/fuzz/generator.py (seed {seed})."""
from dataclasses import dataclass

import torch
import torch.nn as nn

N, D, V = {N}, {D}, {V}


@dataclass
class Out:
    first: torch.Tensor
    second: object = None
    third: object = None


class Model(nn.Module):
    def __init__(self):
        super().__init__()
'''


def generate(seed: int, steps: tuple[int, int] = (3, 14)) -> Generated:
    """A random model (source text) and the generator's prediction for it."""
    rng = random.Random(seed)
    w = _Writer(rng)
    w.values.append(Value("x"))
    marks: list[tuple[int, str]] = []
    for _ in range(rng.randint(*steps)):
        _step(w, marks)
    # outputs: the last value plus up to two others, in a random container
    used = {name for line in w.lines for name in re.findall(r"\b(v\d+)\b", line.split("=", 1)[-1])}
    sinks = [value for value in w.values[1:-1] if value.name not in used]  # computed, never consumed
    others = sinks if sinks and rng.random() < 0.8 else w.values[:-1]
    outputs = [w.values[-1]] + rng.sample(others, k=min(len(others), rng.randint(0, 2)))
    names = [value.name for value in outputs]
    form = rng.choice(("single", "tuple", "dict", "dataclass")) if len(names) > 1 else rng.choice(("single", "dataclass"))
    returned = {
        "single": " + ".join(names),
        "tuple": "(" + ", ".join(names) + ")",
        "dict": "{" + ", ".join(f"'o{i}': {n}" for i, n in enumerate(names)) + "}",
        "dataclass": "Out(" + ", ".join(names) + ")",
    }[form]
    w.emit(f"return {returned}")
    unused = [w.layer("linear") for _ in range(rng.choice((0, 0, 1)))]
    frozen = {name for name in w.layers if rng.random() < 0.12}
    init = [f"        self.{name} = {ctor}" for name, ctor in w.layers.items()]
    init += [f"        self.{name}.requires_grad_(False)" for name in sorted(frozen)]
    head = HEADER.format(seed=seed, N=N, D=D, V=V).splitlines() + init + ["", "    def forward(self, x, t):"]
    offset = len(head)
    tail = ["", "", "def example_inputs():", "    return torch.randn(N, D), torch.randint(0, V, (N,))", ""]
    source = "\n".join(head + w.lines + tail)
    output = combine("output", *outputs)
    shift = lambda lines: {line + offset for line in lines}  # noqa: E731 - body lines -> file lines
    output.zero = {layer: shift(lines) for layer, lines in output.zero.items()}
    output.cut = {layer: shift(lines) for layer, lines in output.cut.items()}
    del unused  # never called: the prediction simply does not mention them
    return Generated(source, dict(w.layers), frozen, output, {line + offset: kind for line, kind in marks},
                     set(w.unused_params), {line + offset: kind for line, kind in w.idioms.items()})


def predicted_verdict(generated: Generated, layer: str, parameter: str | None = None) -> str:
    """The static verdict the generator expects for every parameter of ``layer`` (or for ``parameter``:
    one tracked apart from its layer, such as a one-step LSTM's ``weight_hh_l0``, goes by its own paths)."""
    if layer in generated.frozen:
        return "frozen"
    if parameter in generated.unused_params:
        return "unused"
    layer = _tracked(generated, layer, parameter)
    if layer in generated.output.wet:
        return "reachable"
    if layer in generated.output.zero:
        return "zero"
    if layer in generated.output.cut:
        return "cut"
    return "unused"


def predicted_lines(generated: Generated, layer: str, parameter: str | None = None) -> set[int]:
    """Lines of the cut (or zero) sites fxflow should name for ``layer`` (or ``parameter``)."""
    verdict = predicted_verdict(generated, layer, parameter)
    layer = _tracked(generated, layer, parameter)
    if verdict == "zero":
        return generated.output.zero[layer]
    if verdict == "cut":
        return generated.output.cut[layer]
    return set()


def _tracked(generated: Generated, layer: str, parameter: str | None) -> str:
    """``parameter`` where the generator tracks its paths apart from its layer's, else ``layer``."""
    output = generated.output
    return parameter if parameter in (output.wet | set(output.zero) | set(output.cut)) else layer
