"""Subcommands of the ``mediapipe`` command line, one module each."""
