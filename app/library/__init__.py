"""The model library: the GGUF files the user already has (LM Studio, Ollama, the Hugging
Face cache, their own folders), described from metadata alone, and the draft finder.

No Qt: the window runs a scan on a worker thread (docs/ARCHITECTURE.md)."""
