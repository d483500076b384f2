"""Implementations of the engine's ModelBackend protocol."""
