"""GGUF model files: the header validated once before llama.cpp sees a byte
(``header``, ``rules``), the metadata the engine reads from it (``meta``), the one
opened handle a load passes around (``model_file``), and what a file says about its
memory kind and trained draft heads. Knows nothing of decoding or of chats."""
