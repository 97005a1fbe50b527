"""bringup: bring a GGUF language model up to a certified, standalone native program."""

__version__ = "0.1.0"
