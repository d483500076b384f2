"""The one package of Tandem that talks to llama.cpp (llama-cpp-python and the ggml
library under it); an import contract in pyproject.toml keeps every other module of
``app`` from importing ``llama_cpp``. One place to read what is asked of llama.cpp, and
one place to change when its bindings change.

- ``backend``: ``LlamaBackend``, a model and its context: batches, decoding,
  rollback, token trees, the recurrent memory's checkpoints (``state_checkpoints``,
  ``token_tree``);
- ``vocabulary``: tokenizing and each token's text; ``LlamaVocab``, a vocabulary alone;
- ``builtin_chat_formats``: llama.cpp's own chat formats;
- ``grammar``: llama.cpp's grammar sampler as a constraint, and JSON schemas as grammars;
- ``quantizer``: GGUF files written again in another type;
- ``rpc``: ggml's RPC backend (workers' devices, this machine as a worker);
- ``process_setup`` and ``log_capture``: the once-per-process set-up, and llama.cpp's
  log, from which its errors' reasons and a load's decisions are read.

Importing this package loads nothing: llama.cpp is loaded by the first module that needs it.
"""
