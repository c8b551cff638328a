"""``python -m sinklab`` (what torchrun runs): the same entry point as the ``sinklab`` script."""

import sys

from .cli import main

sys.exit(main())
