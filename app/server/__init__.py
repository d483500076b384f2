"""``tandem serve``: the speculative engine behind an OpenAI-compatible HTTP API.

A front end beside the window (docs/ARCHITECTURE.md, "Adding a front end"): it drives
``app.session`` and imports nothing of Qt.

- ``errors``: OpenAI's error JSON, one ``ApiError`` per refusal;
- ``requests``: the request bodies (pydantic), checked and turned into a ``JobSpec``;
- ``worker``: one thread owns the loaded pair and runs jobs first come, first served;
- ``replies``: the OpenAI response and chunk shapes, with ``tandem`` and ``timings``;
- ``tools``: tool calls: the request's tool fields checked, the reply's calls read;
- ``guard``: the API key, the body cap and JSON errors for every route;
- ``api``: the routes (FastAPI);
- ``ollama``: Ollama's routes beside them (``ollama_requests``: its bodies as OpenAI's;
  ``ollama_models``: the loaded pair as Ollama describes a model);
- ``command``: the ``serve`` subcommand (options, binding, uvicorn, Ctrl+C).
"""
