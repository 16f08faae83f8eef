"""The zoo beyond transformers: the libraries people train models from, one module of specimens each.

:func:`register` imports each library's module (which registers its specimens); a library that is
not installed is recorded in :data:`MISSING` with its import error instead, and its models are
simply not in the zoo (tests/test_zoo_libraries.py fails when a library of the ``test`` extra is
missing, so CI never silently checks fewer).
"""
from __future__ import annotations

import importlib
from typing import Any

import torch

# library (as it is imported) -> the zoo module that builds its models
LIBRARIES: dict[str, str] = {"timm": "lib_timm", "torchvision": "lib_torchvision", "diffusers": "lib_diffusers",
                             "peft": "lib_peft", "torch_geometric": "lib_pyg", "torchaudio": "lib_torchaudio",
                             "monai": "lib_monai", "segmentation_models_pytorch": "lib_smp",
                             "ultralytics": "lib_ultralytics", "open_clip": "lib_open_clip",
                             "sentence_transformers": "lib_sentence_transformers", "e3nn": "lib_e3nn",
                             "x_transformers": "lib_x_transformers", "vector_quantize_pytorch": "lib_vector_quantize",
                             "torchdiffeq": "lib_torchdiffeq", "kornia": "lib_kornia", "gpytorch": "lib_gpytorch",
                             "neuralforecast": "lib_neuralforecast"}
# library -> the prefix of its specimens' names (tests/test_zoo_libraries.py holds every specimen to it),
# so a pin can name a model of a library that is not installed here
PREFIXES: dict[str, str] = {"timm": "timm_", "torchvision": "tv_", "diffusers": "diffusers_", "peft": "peft_",
                            "torch_geometric": "pyg_", "torchaudio": "ta_", "monai": "monai_",
                            "segmentation_models_pytorch": "smp_", "ultralytics": "yolo_", "open_clip": "openclip_",
                            "sentence_transformers": "st_", "e3nn": "e3nn_", "x_transformers": "xt_",
                            "vector_quantize_pytorch": "vq_", "torchdiffeq": "ode_", "kornia": "kornia_",
                            "gpytorch": "gp_", "neuralforecast": "nf_"}
MISSING: dict[str, str] = {}  # library -> why its module could not be imported
# Libraries the zoo checks where they import, but the test extra does not install (nor CI): torchaudio's
# wheel on the package index is built for CUDA torch only, and its extension does not load on CPU torch;
# the others install and run here, but pull in much more than a test needs (measured installing each
# alone into a venv that holds the test extra, on the shared 2-core machine).
OUTSIDE_TEST_EXTRA: dict[str, str] = {
    "torchaudio": "the index's wheel does not load on CPU torch 2.13",
    "ultralytics": "heavy: opencv-python, polars and more (74 s to install), for 4 models",
    "neuralforecast": "heavy: ray[tune], optuna, pandas (111 s to install; 13 s to import), for 4 models",
}
# Libraries asked for that the zoo has no models of, and why (docs/tested-on.md says so).
NOT_IN_ZOO: dict[str, str] = {
    "speechbrain": "it imports torchaudio when imported (speechbrain/__init__ through its audio I/O, and its lobes "
                   "for their transforms), whose index wheel does not load on CPU torch 2.13, so not one of its "
                   "models can be built here; speechbrain 1.1.2 installs, and pulls that torchaudio in",
}


# Where an import may rebind torch's own functions: torch_geometric wraps ``torch.index_select``
# (for its HashTensor) process-wide, which symbolic tracing of any later model in the same test
# worker then trips over. :func:`register` puts back whatever an import rebound.
TORCH_NAMESPACES = (torch, torch.Tensor, torch.nn.functional, torch.autograd.Function)


def _bindings() -> dict[tuple[Any, str], Any]:
    return {(owner, name): value for owner in TORCH_NAMESPACES for name, value in vars(owner).items()}


def not_built_here(name: str) -> bool:
    """Whether ``name`` is a specimen this machine cannot build (its pins still stand): its library did
    not import, or it needs torchvision's compiled extension, which does not load here."""
    if any(name.startswith(PREFIXES[library]) for library in MISSING):
        return True
    from .lib_torchvision import NOT_BUILT_HERE
    return name in NOT_BUILT_HERE


def register() -> None:
    """Import every library's zoo module once; the ones whose library does not import go to
    :data:`MISSING`. torch's functions are left as they were (a library's rebinding is undone)."""
    before = _bindings()
    for library, module in LIBRARIES.items():
        try:
            importlib.import_module(f"{__package__}.{module}")
        except (ImportError, OSError) as error:  # OSError: a compiled extension built for another torch
            MISSING[library] = f"{type(error).__name__}: {error}"
    for (owner, name), value in before.items():
        if vars(owner).get(name, value) is not value:
            setattr(owner, name, value)


register()
