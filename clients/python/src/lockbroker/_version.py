"""The package's version: read by ``pyproject.toml`` (setuptools' ``attr:``) and sent in ``User-Agent``."""

__version__ = "0.2.0"
