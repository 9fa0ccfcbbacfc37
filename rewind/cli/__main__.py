"""``python -m rewind.cli``: the command line."""

import sys

from rewind.cli.main import main

sys.exit(main())
