"""``python -m nnhal``: the command line."""

import sys

from nnhal.cli import main

sys.exit(main())
