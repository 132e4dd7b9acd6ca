"""`python -m uopkit ...` runs the `uopkit` command (the same `uopkit.cli.main`)."""

import sys

from uopkit.cli import main

sys.exit(main())
