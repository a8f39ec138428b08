"""swapctl: ship a new build of a GPU daemon to remote GPU machines and swap it in safely."""

__version__ = "0.1.0"  # the one place it is written: pyproject.toml reads it
