"""The version, here so that every layer (core included) can say it without importing the package root."""

__version__ = "0.1.0"
