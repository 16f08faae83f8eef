"""Integrations with training frameworks (optional extras, imported lazily)."""
