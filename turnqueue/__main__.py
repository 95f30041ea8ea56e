"""``python -m turnqueue``: the same commands as the ``turnqueue`` script."""

import sys

from turnqueue.cli import main

sys.exit(main())
