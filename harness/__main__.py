import sys

from harness.cli import main

if __name__ == "__main__":  # not when a worker process re-imports the main module (Dask's spawn)
    sys.exit(main())
