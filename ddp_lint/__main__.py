"""``python -m ddp_lint``: the same as the ``ddp-lint`` command."""
import sys

from .cli import main

sys.exit(main())
