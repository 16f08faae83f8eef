"""A fine-tuning loop whose new head is never trained: it was put on after the optimizer was built.

    python examples/optimizer_replaced_head.py           # the bug: the report names the head, exits 1
    python examples/optimizer_replaced_head.py --fixed   # optimizer built after the swap: trains, exits 0

Every gradient arrives, so no gradient check sees it: AdamW keeps stepping the old head's tensors
(ghosts, no longer part of the model) while the new head stays at its random init.
``fxflow.watch(model, optimizer=optimizer)`` compares the optimizer's groups with the model's parameters.
"""
import argparse
import sys

import torch
import torch.nn as nn

import fxflow


class Classifier(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.backbone(x))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixed", action="store_true", help="build the optimizer after replacing the head")
    options = parser.parse_args()

    torch.manual_seed(0)
    model = Classifier()  # "pretrained" on 10 classes
    if not options.fixed:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.head = nn.Linear(32, 3)  # the new task has 3 classes
    if options.fixed:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    criterion = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(0)
    with fxflow.watch(model, optimizer=optimizer, steps=3) as w:  # the first three real steps
        for _ in range(3):
            x = torch.randn(16, 16, generator=generator)
            y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
    print(w.report.table(width=100))
    return w.report.exit_code


if __name__ == "__main__":
    sys.exit(main())
