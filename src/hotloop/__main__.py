import sys

from hotloop.cli import main

sys.exit(main())
