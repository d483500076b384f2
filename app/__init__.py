"""Tandem: a desktop chat app with lossless speculative decoding on llama.cpp."""

__version__ = "0.1.0"
