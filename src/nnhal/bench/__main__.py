"""``python -m nnhal.bench``: the same as ``nnhal bench``."""

import sys

from nnhal.bench.report import main

sys.exit(main())
