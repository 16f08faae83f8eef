"""Static stage: annotate every node with how gradient passes through it, then one backward walk."""
