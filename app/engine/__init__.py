"""The speculative-decoding engine: pure Python + numpy, no Qt, no llama_cpp."""
