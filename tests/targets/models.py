"""Small models used as CLI targets by the CLI tests (good ones and broken ones)."""
import torch
import torch.nn as nn

CONSTANT = 3


class Good(nn.Module):
    """Everything learns."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)

    def forward(self, x):
        return self.fc(x)


class Cut(nn.Module):
    """middle and first are cut by a detach (line 30)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(10, 8)
        self.last = nn.Linear(8, 2)

    def forward(self, x):
        h = self.first(x).detach()
        return self.last(h)


class NeedsArgs(nn.Module):
    """Constructor needs hidden and depth; scale has a default."""

    def __init__(self, hidden, depth, scale=1.0, act="relu"):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(hidden, hidden) for _ in range(depth)])
        self.scale = scale
        self.act = act

    def forward(self, x):
        h = self.layers(x) * self.scale
        return torch.relu(h) if self.act == "relu" else torch.tanh(h)


def build(width=6):
    """A function that returns a module."""
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


def returns_int():
    return 3


class NotAModule:
    pass


class IntOutput(nn.Module):
    """Returns only integer tensors: nothing to differentiate."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)

    def forward(self, x):
        return self.fc(x).argmax(dim=-1)


class NoParams(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


class AllFrozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)
        self.fc.requires_grad_(False)

    def forward(self, x):
        return self.fc(x)


class Embed(nn.Module):
    """Token ids in, one float per sequence out."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(5, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, tokens):
        return self.head(self.embedding(tokens).mean(dim=1))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(10, 4)
        self.b = nn.Linear(3, 4)

    def forward(self, x, y):
        return self.a(x) + self.b(y)


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.conv(x).mean(dim=(2, 3)))


class Dropout(nn.Module):
    """Random in forward: --seed decides the numbers."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 10)
        self.drop = nn.Dropout(0.5)
        self.out = nn.Linear(10, 2)

    def forward(self, x):
        return self.out(self.drop(self.fc(x)))


class Twin(nn.Module):
    """online learns; target is deliberately dry (a target network)."""

    def __init__(self):
        super().__init__()
        self.online = nn.Linear(10, 4)
        self.target_net = nn.Linear(10, 4)

    def forward(self, x):
        with torch.no_grad():
            goal = self.target_net(x)
        return self.online(x) - goal


class Chatty(nn.Module):
    """Prints from forward: the report on stdout must stay clean."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 2)

    def forward(self, x):
        print("chatty forward called")
        return self.fc(x)
