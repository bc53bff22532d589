"""`python -m refine_tui.cli`: the `refine` command."""

import sys

from refine_tui.cli import main

sys.exit(main())
