"""Written by `python scripts/zoo.py --pin`: the zoo's (model, capture path) pairs whose capture fails."""

UNAVAILABLE: dict[str, dict[str, str]] = {}
