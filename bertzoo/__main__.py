import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bertzoo.cli import main

sys.exit(main())
