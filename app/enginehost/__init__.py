"""The engine process: llama.cpp, the loaded pair, its KV cache and copy sources, away from
the window, so that whatever kills llama.cpp (an assert mid-decode, a GPU reset, the
out-of-memory killer) kills only this process.

Started by a front end (``app.session.engine_link``) as ``python -m app --engine``; it
talks back over one local channel with the messages of ``app.session.protocol``.
Imports no Qt; the window never imports this package (pyproject.toml's contracts).
"""
