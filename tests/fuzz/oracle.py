"""Check fxflow on one generated model against a real backward; list every disagreement."""
from __future__ import annotations

import importlib.util
import os
import sys
from collections import Counter
from dataclasses import dataclass, field

import torch

import fxflow
from tests.fuzz.generator import Generated, generate, predicted_lines, predicted_verdict
from tests.models import (STATIC_PROMISE, ModelState, float64_grads, grad_kind, projection, real_grads,
                          reference_dynamic, split_source)


@dataclass
class Outcome:
    """What one model's check found."""

    seed: int
    path: str
    problems: list[str] = field(default_factory=list)
    static: Counter = field(default_factory=Counter)
    planted: Counter = field(default_factory=Counter)
    idioms: Counter = field(default_factory=Counter)
    captured: bool = True  # False: the one capture method asked for cannot capture this model


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # inspect (and fxflow) find the source through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def check_seed(seed: int, directory: str, method: str | None = None) -> Outcome:
    """Generate model ``seed`` into ``directory``, run fxflow, compare with autograd.

    ``method`` restricts the capture to one method; a model it cannot capture is then not a
    finding (``outcome.captured`` is False), while the full chain must capture every model.
    """
    generated: Generated = generate(seed)
    path = os.path.join(directory, f"fuzz_{seed}.py")
    with open(path, "w") as handle:
        handle.write(generated.source)
    outcome = Outcome(seed, path, planted=Counter(generated.planted.values()),
                      idioms=Counter(generated.idioms.values()))
    module = load(path, f"fxflow_fuzz_{seed}")
    torch.manual_seed(seed)
    model = module.Model()
    inputs = module.example_inputs()
    before = ModelState.of(model)
    try:
        report = fxflow.check(model, inputs, loss_fn=projection, capture_methods=[method] if method else None)
    except Exception as error:  # a crash is a finding too
        outcome.problems.append(f"check raised {type(error).__name__}: {error}")
        return outcome
    try:
        ModelState.of(model).assert_same(before)
    except AssertionError as error:
        outcome.problems.append(f"model changed by the check: {error}")
    grads = real_grads(model, inputs, loss_fn=projection)
    dynamic = reference_dynamic(grads, wide=lambda: float64_grads(model, inputs, loss_fn=projection))
    if report.trace.method == "none":
        if method is not None:
            outcome.captured = False
            return outcome
        outcome.problems.append(f"no capture: {report.trace.notes}")
    for parameter in report.parameters:
        name = parameter.name
        layer = name.split(".")[0]
        outcome.static[parameter.static] += 1
        real = grad_kind(grads[name])
        if STATIC_PROMISE[parameter.static] != real and not (parameter.static == "reachable" and real == "zero"):
            outcome.problems.append(f"{name}: static {parameter.static} but real gradient {real}")
        if parameter.dynamic != dynamic[name]:
            outcome.problems.append(f"{name}: dynamic {parameter.dynamic} but reference {dynamic[name]}")
        if parameter.agree is not True:
            outcome.problems.append(f"{name}: report says static/dynamic disagree ({parameter.diagnosis})")
        expected = predicted_verdict(generated, layer, name)
        if parameter.static != expected:
            outcome.problems.append(f"{name}: static {parameter.static} but generator predicts {expected}")
            continue
        predicted = predicted_lines(generated, layer, name) if expected != "unused" else set()
        lines = set()
        for site in parameter.cut_by:
            where = split_source(site.source)
            if where is None or where[0] != os.path.abspath(path):
                outcome.problems.append(f"{name}: cut site {site} is not in the model file")
                continue
            lines.add(where[1])
            if where[1] not in generated.planted:
                outcome.problems.append(f"{name}: cut site {site.op} at line {where[1]} was not planted")
        if lines != predicted:
            outcome.problems.append(f"{name}: cut lines {sorted(lines)} but predicted {sorted(predicted)}")
    return outcome
