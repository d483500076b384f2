"""A chat session without Qt: what every front end (window, terminal, bench, self-test,
and a server) drives.

- ``config``: the models to load (``ModelSpec``) and settings → engine configs;
- ``loading``: one path from a choice of models to a loaded ``ChatSession``
  (demo-pair resolution, compatibility, load info);
- ``chat``: ``ChatSession`` — a conversation into tokens (template, fitting into the
  context) and one reply as a stream of token events with its stats.
"""
