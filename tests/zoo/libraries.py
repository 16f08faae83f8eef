"""The zoo beyond transformers: the libraries people train models from, one module of specimens each.

:func:`register` imports each library's module (which registers its specimens); a library that is
not installed is recorded in :data:`MISSING` with its import error instead, and its models are
simply not in the zoo (tests/test_zoo_libraries.py fails when a library of the ``test`` extra is
missing, so CI never silently checks fewer).
"""
from __future__ import annotations

import importlib

# library (as pip names it) -> the zoo module that builds its models
LIBRARIES: dict[str, str] = {"timm": "lib_timm", "torchvision": "lib_torchvision", "diffusers": "lib_diffusers",
                             "peft": "lib_peft", "torch_geometric": "lib_pyg", "torchaudio": "lib_torchaudio"}
MISSING: dict[str, str] = {}  # library -> why its module could not be imported


def register() -> None:
    """Import every library's zoo module once; the ones whose library does not import go to :data:`MISSING`."""
    for library, module in LIBRARIES.items():
        try:
            importlib.import_module(f"{__package__}.{module}")
        except ImportError as error:
            MISSING[library] = f"{type(error).__name__}: {error}"


register()
