"""``python -m computewatch``."""

import sys

from computewatch.cli import main

sys.exit(main())
