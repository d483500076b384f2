"""The chat window assembled: controllers that join the widgets of ``app.ui`` to the
engine client (``app.bridge``), the chat history (``app.storage``) and ``app.session``.

Widgets only display and emit; everything here decides. See docs/ARCHITECTURE.md.
"""
