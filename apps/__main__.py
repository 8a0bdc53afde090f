import sys

from edgert.apps.cli import main

sys.exit(main())
