import sys

from hotloop.cli import main

# Guarded: file_search's ingestion workers are spawned processes, which import the parent's main module.
if __name__ == "__main__":
    sys.exit(main())
