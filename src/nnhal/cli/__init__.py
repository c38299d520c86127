"""The command line (``nnhal COMMAND``): every command's code; ``main`` is the
entry point (``nnhal.cli:main``)."""

from nnhal.cli.app import main

__all__ = ["main"]
