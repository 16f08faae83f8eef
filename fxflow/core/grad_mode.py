"""Record ``torch.no_grad()`` / ``inference_mode()`` / ``set_grad_enabled(False)`` regions while a capture runs.

Tracers drop these context managers silently (pytorch #62043): the graph they produce
computes with gradients everywhere. While a capture runs, :class:`GradModeRecorder` watches
the two switches every such context manager flips and remembers where (the user's line) the
current region began, so each captured node can carry the region it was created in.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from ..verdicts import GRAD_MODE_KEY, GradRegion
from .patching import INFERENCE_MODE, ThreadPatch
from .source import current_user_source

META_KEY = GRAD_MODE_KEY


class GradModeRecorder:
    """Records the grad-mode switches of the thread that runs :meth:`recording`, and the active region."""

    def __init__(self) -> None:
        self._inference_stack: list[GradRegion | None] = []
        self.grad_region: GradRegion | None = None
        self.inference_region: GradRegion | None = None

    def current(self) -> GradRegion | None:
        """The region a node created right now belongs to, or None when gradients are on."""
        if torch.is_inference_mode_enabled():
            return self.inference_region or GradRegion("inference_mode", None)
        if not torch.is_grad_enabled():
            return self.grad_region or GradRegion("no_grad", None)
        return None

    @contextlib.contextmanager
    def recording(self) -> Iterator["GradModeRecorder"]:
        """Inside, this thread's grad-mode switches are recorded; other threads' are not seen."""
        recorder = self

        def set_grad_enabled(mode: bool) -> None:
            if not mode and torch.is_grad_enabled():
                recorder.grad_region = GradRegion("no_grad", current_user_source())
            elif mode:
                recorder.grad_region = None
            original_set(mode)

        class InferenceMode:  # wraps torch._C._InferenceMode, a context manager
            def __init__(self, mode: bool) -> None:
                # the C++ guard may switch the mode on as soon as it is built: look before
                self._begins = mode and not torch.is_inference_mode_enabled()
                self._guard = original_inference(mode)

            def __enter__(self) -> None:
                recorder._inference_stack.append(recorder.inference_region)
                if self._begins:
                    recorder.inference_region = GradRegion("inference_mode", current_user_source())
                self._guard.__enter__()

            def __exit__(self, *exc: object) -> None:
                self._guard.__exit__(*exc)
                recorder.inference_region = recorder._inference_stack.pop()

        with _SET_GRAD_ENABLED.active(set_grad_enabled) as original_set, \
                INFERENCE_MODE.active(InferenceMode) as original_inference:
            yield self


_SET_GRAD_ENABLED = ThreadPatch(torch._C, "_set_grad_enabled")
