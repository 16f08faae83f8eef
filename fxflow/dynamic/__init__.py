"""Dynamic stage: one real forward and backward of the user's module, and what it measured."""
