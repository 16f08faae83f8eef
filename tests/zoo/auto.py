"""Every other transformers model type, built by the general builder of :mod:`.shrink`.

:func:`build` makes one model type tiny: its default config shrunk, extra config values where
the defaults need them, the model class with a task head where transformers has one (causal LM,
then seq2seq LM, then image classification, else the base model), and the inputs a user would
pass. :mod:`.hf_auto_text` and :mod:`.hf_auto_media` list the model types built this way, by
family, with their recipes; :mod:`.unbuildable` the ones that cannot be built here, and why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import transformers as T
from transformers.models.auto import configuration_auto, modeling_auto

from .registry import Built, specimen
from .shrink import shrink, tiny_inputs

HEAD_MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
                 "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "MODEL_MAPPING_NAMES")


@dataclass(frozen=True)
class Recipe:
    """What one model type needs beyond its shrunk defaults."""

    config: dict[str, Any] = field(default_factory=dict)  # set on the shrunk config
    model_class: str | None = None  # a transformers class name, instead of the first head found
    inputs: Callable[[torch.nn.Module], dict[str, Any]] | None = None  # instead of tiny_inputs


def model_class(model_type: str) -> type:
    """The first class with a task head that transformers maps ``model_type`` to, else its base model."""
    for mapping in HEAD_MAPPINGS:
        name = getattr(modeling_auto, mapping).get(model_type)
        if isinstance(name, (list, tuple)):
            name = name[0]
        if name and hasattr(T, name):
            return getattr(T, name)
    raise LookupError(f"transformers maps no PyTorch model class to {model_type!r}")


def _set(config: Any, values: dict[str, Any]) -> None:
    for key, value in values.items():
        if "." in key:  # "text_config.hidden_size"
            head, rest = key.split(".", 1)
            _set(getattr(config, head), {rest: value})
        else:
            setattr(config, key, value)


def build(model_type: str, recipe: Recipe = Recipe()) -> Built:
    """``model_type`` from its default config shrunk, with ``recipe``'s overrides, and its inputs."""
    config = shrink(configuration_auto.CONFIG_MAPPING[model_type]())
    _set(config, recipe.config)
    cls = getattr(T, recipe.model_class) if recipe.model_class else model_class(model_type)
    model = cls(config)
    return model, (recipe.inputs or tiny_inputs)(model)


def register(family: str, recipes: dict[str, Recipe] | list[str]) -> None:
    """One zoo specimen per model type (a list: no recipe needed), named as transformers names
    the type with ``-`` as ``_``."""
    table = recipes if isinstance(recipes, dict) else dict.fromkeys(recipes, Recipe())
    for model_type, recipe in table.items():
        def make(model_type: str = model_type, recipe: Recipe = recipe) -> Built:
            return build(model_type, recipe)
        specimen(family, name=model_type.replace("-", "_"))(make)
