"""Integrations with training frameworks (optional extras, imported lazily).

* :mod:`fxflow.integrations.transformers`: ``GradientFlowCallback`` for the Hugging Face ``Trainer``
  (``pip install fxflow[transformers]``);
* :mod:`fxflow.integrations.lightning`: ``GradientFlowCheck`` for PyTorch Lightning
  (``pip install fxflow[lightning]``);
* :mod:`fxflow.integrations.first_step`: what both do, on top of :class:`fxflow.Watch`.

Importing this package imports no framework; each module above imports only its own.
"""
