"""A target file whose own import fails."""
import torch.nn as nn
import fxflow_no_such_module_xyz  # noqa: F401


class Net(nn.Module):
    pass
