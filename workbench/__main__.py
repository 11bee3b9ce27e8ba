"""``python -m workbench``: the same as the ``workbench`` command."""

import sys

from .cli import main

sys.exit(main())
