"""Designed zero-initializations that learn from step 2 or 3, and look-alikes whose exact zero never lifts.

The truth for each is a few real optimizer steps (tests/test_lookahead.py), not a list kept here.
"""
import torch, torch.nn as nn, torch.nn.functional as F

class AdaLNBlock(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False)
        self.mlp = nn.Sequential(nn.Linear(d, 2*d), nn.GELU(), nn.Linear(2*d, d))
        self.ada = nn.Linear(d, 6*d)
        nn.init.zeros_(self.ada.weight); nn.init.zeros_(self.ada.bias)
    def forward(self, x, c):
        s1, sc1, g1, s2, sc2, g2 = self.ada(F.silu(c)).unsqueeze(1).chunk(6, dim=-1)
        h = self.norm1(x) * (1 + sc1) + s1
        x = x + g1 * self.attn(h, h, h, need_weights=False)[0]
        h = self.norm2(x) * (1 + sc2) + s2
        return x + g2 * self.mlp(h)

class DiT(nn.Module):
    def __init__(self, d=16, zero_final=False):
        super().__init__()
        self.embed = nn.Linear(8, d); self.cond = nn.Linear(4, d)
        self.blocks = nn.ModuleList([AdaLNBlock(d) for _ in range(2)])
        self.final = nn.Linear(d, 8)
        if zero_final:
            nn.init.zeros_(self.final.weight); nn.init.zeros_(self.final.bias)
    def forward(self, x, c):
        h = self.embed(x); c = self.cond(c)
        for b in self.blocks: h = b(h, c)
        return self.final(h)
    def example_inputs(self):
        return torch.randn(2, 5, 8), torch.randn(2, 4)

class ReZero(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.f = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
        self.alpha = nn.Parameter(torch.zeros(1))
        self.out = nn.Linear(16, 2)
    def forward(self, x):
        h = self.inp(x)
        h = h + self.alpha * self.f(h)
        return self.out(h)

class ZeroConv(nn.Module):  # ControlNet-style
    def __init__(self):
        super().__init__()
        self.base = nn.Conv2d(3, 8, 3, padding=1)
        self.ctrl = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.zero = nn.Conv2d(8, 8, 1); nn.init.zeros_(self.zero.weight); nn.init.zeros_(self.zero.bias)
        self.head = nn.Conv2d(8, 2, 1)
    def forward(self, x, hint):
        return self.head(self.base(x) + self.zero(self.ctrl(hint)))
    def example_inputs(self):
        return torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)

class ZeroChain(nn.Module):
    """Two zero-inits in a chain (ControlNet's zero conv_out behind its zero convolutions): ``ctrl``
    learns from step 3, once ``z2`` has moved ``z1``'s gradient and ``z1`` has moved."""

    def __init__(self):
        super().__init__()
        self.base = nn.Linear(8, 8)
        self.ctrl = nn.Linear(8, 8)
        self.z1 = nn.Linear(8, 8); nn.init.zeros_(self.z1.weight); nn.init.zeros_(self.z1.bias)
        self.z2 = nn.Linear(8, 8, bias=False); nn.init.zeros_(self.z2.weight)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.base(x) + self.z1(self.ctrl(x))
        return self.head(x) + self.head(self.z2(h))


class ZeroTimesZero(nn.Module):
    """A zero gate fed by a zero layer with nothing in between: both get exactly 0 forever (a look-alike)."""

    def __init__(self):
        super().__init__()
        self.z1 = nn.Linear(8, 8, bias=False); nn.init.zeros_(self.z1.weight)
        self.z2 = nn.Linear(8, 8, bias=False); nn.init.zeros_(self.z2.weight)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(x + self.z2(self.z1(x)))


class LoRALinear(nn.Module):
    def __init__(self, i, o, r=4, alpha=1.0, freeze_b=False):
        super().__init__()
        self.base = nn.Linear(i, o); self.base.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(r, i) * 0.1)
        self.B = nn.Parameter(torch.zeros(o, r), requires_grad=not freeze_b)
        self.alpha = alpha
    def forward(self, x):
        return self.base(x) + self.alpha * (x @ self.A.t() @ self.B.t())

class LoRANet(nn.Module):
    def __init__(self, alpha=1.0, freeze_b=False):
        super().__init__()
        self.l1 = LoRALinear(8, 16, alpha=alpha, freeze_b=freeze_b); self.l2 = LoRALinear(16, 2, alpha=alpha, freeze_b=freeze_b)
    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))

class ZeroReadout(nn.Module):  # muP
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.readout = nn.Linear(32, 3); nn.init.zeros_(self.readout.weight)
    def forward(self, x): return self.readout(self.body(x))

class BNZero(nn.Module):  # zero_init_residual
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.c1 = nn.Conv2d(8, 8, 3, padding=1); self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1); self.b2 = nn.BatchNorm2d(8); nn.init.zeros_(self.b2.weight)
        self.fc = nn.Linear(8, 2)
    def forward(self, x):
        h = self.stem(x)
        h = F.relu(h + self.b2(self.c2(F.relu(self.b1(self.c1(h))))))
        return self.fc(h.mean((2, 3)))
    def example_inputs(self): return (torch.randn(4, 3, 8, 8),)

# look-alikes
class DetachedGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Linear(8, 8); self.g = nn.Parameter(torch.zeros(8)); self.out = nn.Linear(8, 2)
    def forward(self, x): return self.out(x + self.g.detach() * self.f(x))

class BufferGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Linear(8, 8); self.register_buffer("g", torch.zeros(8)); self.out = nn.Linear(8, 2)
    def forward(self, x): return self.out(x + self.g * self.f(x))

class AuxZero(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Linear(8, 2); self.aux = nn.Linear(8, 2)
    def forward(self, x):
        out = self.main(x)
        return out.pow(2).mean() + 0.0 * self.aux(x).pow(2).mean()

class DeadReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16); self.b = nn.Linear(16, 16); self.c = nn.Linear(16, 2); self.skip = nn.Linear(8, 2)
        with torch.no_grad(): self.b.bias.fill_(-100.0)
    def forward(self, x): return self.c(torch.relu(self.b(torch.relu(self.a(x))))) + self.skip(x)

class DiTZeroFinal(DiT):
    """DiT's zero final layer in front of adaLN-Zero: the blocks learn from step 3."""

    def __init__(self):
        super().__init__(zero_final=True)


class LoRAFrozenB(LoRANet):
    """LoRA whose zero B is frozen: A never learns (a look-alike)."""

    def __init__(self):
        super().__init__(freeze_b=True)


class LoRAAlpha0(LoRANet):
    """lora_alpha = 0: A and B never learn (a look-alike)."""

    def __init__(self):
        super().__init__(alpha=0.0)
