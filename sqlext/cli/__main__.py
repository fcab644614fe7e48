"""``python -m sqlext.cli``: the ``sqlext`` command."""

import sys

from sqlext.cli import main

sys.exit(main())
