"""Run by tests/test_distributed.py: two gloo ranks on CPU exercise fxflow.watch under DDP and FSDP2.

    python tests/_distributed_worker.py OUTDIR PORT

Each rank writes OUTDIR/rank<N>.json with what it saw; the test asserts on those files.
"""
import io
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


class Broken(nn.Module):
    """A planted detach (first, middle starve) and a layer forward never calls (extra)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(10, 32)
        self.middle = nn.Linear(32, 32)
        self.last = nn.Linear(32, 2)
        self.extra = nn.Linear(2, 2)

    def forward(self, x):
        h = torch.relu(self.first(x))
        h = torch.relu(self.middle(h)).detach()
        return self.last(h)


class Fixed(Broken):
    def forward(self, x):
        return self.last(torch.relu(self.middle(torch.relu(self.first(x)))))


class FixedNoExtra(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(10, 32)
        self.last = nn.Linear(32, 2)

    def forward(self, x):
        return self.last(torch.relu(self.first(x)))


class AuxOnSecondStep(FixedNoExtra):
    """An auxiliary head used on the second step only (its input has 3 columns then)."""

    def __init__(self):
        super().__init__()
        self.aux = nn.Linear(32, 2)

    def forward(self, x):
        h = torch.relu(self.first(x[:, :10]))
        return self.last(h) + (self.aux(h) if x.shape[1] == 11 else 0)


def loss_of(out, rank):
    return nn.functional.cross_entropy(out, torch.arange(out.shape[0]) % 2)


def reference_norms(factory, x):
    """Plain single-process autograd on this rank's batch, then averaged over ranks (what DDP/FSDP do)."""
    torch.manual_seed(0)
    model = factory()
    loss_of(model(x), 0).backward()
    norms = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            norms[name] = None
            continue
        grad = p.grad.clone()
        dist.all_reduce(grad)
        norms[name] = float((grad / dist.get_world_size()).norm())
    return norms


def summary(w):
    report = w.report
    buffer = io.StringIO()
    w.show(file=buffer, color=False)
    guidance = w.ddp_guidance
    return {
        "target": report.target,
        "verdicts": {p.name: [p.static, p.dynamic, p.grad_norm, [s.op for s in p.cut_by]] for p in report.parameters},
        "ok": report.ok,
        "notes": report.notes,
        "printed": buffer.getvalue(),
        "guidance": None if guidance is None else {
            "needed": guidance.needed, "parameters": guidance.parameters,
            "configured": guidance.configured, "will_fail": guidance.will_fail},
    }


def step_error(model, x, rank):
    try:
        loss_of(model(x), rank).backward()
        return None
    except RuntimeError as error:
        return str(error)


def run(rank, outdir, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    import fxflow
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    result = {}
    x = torch.randn(8, 10, generator=torch.Generator().manual_seed(100 + rank))

    # 1. DDP without find_unused_parameters on the broken model: fxflow predicts the failure.
    torch.manual_seed(0)
    model = DDP(Broken(), process_group=dist.new_group())  # own group: the failing step below leaves it dirty
    with fxflow.watch(model) as w:
        loss_of(model(x), rank).backward()
    result["ddp_broken"] = summary(w)
    result["ddp_broken"]["next_step_error"] = step_error(model, x, rank)

    # 2. The same with find_unused_parameters=True: fxflow says it is needed, and training runs.
    torch.manual_seed(0)
    model = DDP(Broken(), find_unused_parameters=True, process_group=dist.new_group())
    with fxflow.watch(model) as w:
        loss_of(model(x), rank).backward()
    result["ddp_find_unused"] = summary(w)
    result["ddp_find_unused"]["next_step_error"] = step_error(model, x, rank) or step_error(model, x, rank)

    # 3. A model where every parameter learns, with stale grads in place: numbers match plain
    #    autograd averaged over ranks, and the stale grads come back added to the new ones.
    torch.manual_seed(0)
    model = DDP(FixedNoExtra(), process_group=dist.new_group())
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    with fxflow.watch(model) as w:
        loss_of(model(x), rank).backward()
    result["ddp_fixed"] = summary(w)
    result["ddp_fixed"]["reference"] = reference_norms(FixedNoExtra, x)
    result["ddp_fixed"]["grad_minus_one_norms"] = {
        name: float((p.grad - 1).norm()) for name, p in model.module.named_parameters()}
    result["ddp_fixed"]["next_step_error"] = step_error(model, x, rank)

    # 4. FSDP2: sharded DTensor parameters and grads, original names, same verdicts.
    torch.manual_seed(0)
    model = Broken()
    for layer in (model.first, model.middle, model.last):
        fully_shard(layer)
    fully_shard(model)
    with fxflow.watch(model) as w:
        loss_of(model(x), rank).backward()
    result["fsdp_broken"] = summary(w)
    result["fsdp_broken"]["reference"] = reference_norms(Broken, x)
    result["fsdp_broken"]["next_step_error"] = step_error(model, x, rank)
    result["fsdp_broken"]["class_after"] = type(model).__name__

    # 5. Three watched steps of a training loop, the auxiliary head on the second only: one DDP
    #    note, from the three steps' counts (intermittent), agreeing with the wrapper's setting.
    torch.manual_seed(0)
    model = DDP(AuxOnSecondStep(), find_unused_parameters=True, process_group=dist.new_group())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with fxflow.watch(model, steps=3) as w:
        for columns in (10, 11, 10):
            optimizer.zero_grad()
            loss_of(model(torch.randn(8, columns)), rank).backward()
            optimizer.step()
    result["ddp_steps"] = summary(w)
    result["ddp_steps"]["intermittent"] = w.ddp_guidance.intermittent
    result["ddp_steps"]["steps_with_gradient"] = {p.name: p.steps_with_gradient for p in w.report.parameters}

    # 6. The tutorial's loop (backward, step, zero_grad) over three watched steps, under DDP on a healthy
    #    model and under FSDP2 on the broken one: judged from each step's gradients, not from the
    #    cleared .grad at the block's end.
    for case, wrap, factory in (("ddp_tutorial", "ddp", FixedNoExtra), ("fsdp_tutorial", "fsdp", Broken)):
        torch.manual_seed(0)
        model = factory()
        if wrap == "ddp":
            model = DDP(model, process_group=dist.new_group())
        else:
            for layer in (model.first, model.middle, model.last):
                fully_shard(layer)
            fully_shard(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with fxflow.watch(model, steps=3, optimizer=optimizer) as w:
            for step in range(3):
                loss_of(model(torch.randn(8, 10, generator=torch.Generator().manual_seed(step))), rank).backward()
                optimizer.step()
                optimizer.zero_grad()
        result[case] = summary(w)
        result[case]["steps_with_gradient"] = {p.name: p.steps_with_gradient for p in w.report.parameters}
        result[case]["grads_after"] = [p.grad is None for p in model.parameters()]

    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as handle:
        json.dump(result, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(sys.argv[1], int(sys.argv[2])), nprocs=2)
