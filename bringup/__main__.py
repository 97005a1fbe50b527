import sys

from bringup.core.cli import main

sys.exit(main())
