"""``python -m sqlext.cli.server_process SPEC``: the program of the server ``sqlext serve``
starts (:mod:`sqlext.server.process`), its stream door running ``sqlext stream`` as this
package's command does (:func:`sqlext.cli.stream.run_on`)."""

import sys

from sqlext.cli.stream import run_on
from sqlext.server.process import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], run_on))
