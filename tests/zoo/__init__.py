"""The zoo: real architectures built from tiny random configs, checked on every capture path.

``hf`` and ``torch_nn`` build the models, ``truth`` runs the plain forward/backward and compares
fxflow's verdicts with it, ``known`` is the one table of (model, path) disagreements that are
known today, and ``run`` checks one model on every path (shared by tests/test_zoo.py and
scripts/zoo.py).
"""
