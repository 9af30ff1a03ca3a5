import sys

from bertzoo.quiet import quiet_tensorflow

quiet_tensorflow()  # before anything imports TensorFlow (BERTZOO_TF_LOGS=1: its logs)

from bertzoo.cli import main  # noqa: E402

sys.exit(main())
