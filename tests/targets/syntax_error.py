"""A target file that does not parse (line 6)."""
import torch.nn as nn


class Net(nn.Module)
    pass
