"""A training loop that checks its first real step with fxflow.watch.

    python examples/train_with_watch.py            # the seed's bug: exits 1 after the report
    python examples/train_with_watch.py --fixed    # no detach: trains 20 steps, exits 0
    torchrun --nproc_per_node 2 examples/train_with_watch.py --fixed   # same under DDP (gloo, CPU)

The watched step is a normal step: fxflow reads each gradient as autograd makes it and never touches
.grad, so optimizer.step() and zero_grad() work as usual. Under torchrun only rank 0 prints.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

import fxflow


class Net(nn.Module):
    def __init__(self, fixed: bool = False):
        super().__init__()
        self.fixed = fixed
        self.first = nn.Linear(10, 32)
        self.middle = nn.Linear(32, 32)
        self.last = nn.Linear(32, 2)

    def forward(self, x):
        h = torch.relu(self.first(x))
        h = torch.relu(self.middle(h))
        if not self.fixed:
            h = h.detach()  # the bug fxflow.watch finds on the first step
        return self.last(h)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixed", action="store_true", help="remove the planted detach")
    parser.add_argument("--steps", type=int, default=20)
    options = parser.parse_args()

    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if distributed:
        torch.distributed.init_process_group("gloo")
    torch.manual_seed(0)
    model = Net(fixed=options.fixed)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    rank = torch.distributed.get_rank() if distributed else 0
    generator = torch.Generator().manual_seed(rank)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = criterion(model(x), y)  # the PyTorch tutorial's order: backward, step, zero_grad
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    status = 0
    for step in range(options.steps):
        x = torch.randn(16, 10, generator=generator)
        y = (x[:, 0] > 0).long()
        if step == 0:
            with fxflow.watch(model, optimizer=optimizer) as w:  # the real step, with the real loss
                loss = train_step(x, y)
            w.show()  # rank 0 only
            if not w.report.ok:
                status = 1
                break
        else:
            loss = train_step(x, y)
    if rank == 0 and status == 0:
        print(f"trained {options.steps} steps, final loss {loss.item():.4f}")
    if distributed:
        del model, optimizer  # DDP's reducer must go before its process group
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
