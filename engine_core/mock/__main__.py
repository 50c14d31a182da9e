"""``python -m engine_core.mock``: the same as ``engine-core --mock``."""

import sys

from engine_core.mock.cli import main

sys.exit(main())
