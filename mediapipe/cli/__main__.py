"""``python -m mediapipe.cli``: the ``mediapipe`` command."""

import sys

from mediapipe.cli import main

sys.exit(main())
