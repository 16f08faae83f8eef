"""A seeded generator of random models with planted gradient cuts, for checking fxflow against autograd."""
