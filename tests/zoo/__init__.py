"""The zoo: real architectures built from tiny random configs, checked against a plain backward.

``hf``, ``hf_media`` and ``torch_nn`` build the first hundred models by hand; ``auto`` (with
``shrink``) builds every other transformers model type from its shrunk default config, listed by
family in ``hf_auto_text`` and ``hf_auto_media``, and ``unbuildable`` says which types it cannot
build and why. ``truth`` runs the plain forward/backward and compares fxflow's verdicts with it,
``known`` holds the tables of what is known today (disagreements, which capture paths fail, the
models left to the matrix), and ``run`` checks one model on a path (shared by tests/test_zoo.py,
tests/zoo_matrix.py and scripts/zoo.py).

Beyond transformers, ``libraries`` registers the models of timm, torchvision, diffusers, peft,
torch_geometric and torchaudio (``lib_*``, one module each; ``vision_ops`` lets torchvision import
where its C++ extension does not load). ``truth.first_learning_step`` trains a model a few real
optimizer steps, ``known_exits`` pins which library models exit 1 and why, and ``page`` writes
their section of docs/tested-on.md.
"""
