"""``python -m fxflow`` is the ``fxflow`` command."""
import sys

from .cli import main

sys.exit(main())
