"""The chat window assembled: controllers that join the widgets of ``app.ui`` to the
engine client (``app.bridge``), the chat history (``app.storage``) and ``app.session``.

Widgets only display and emit; everything here decides. Each controller is handed the
widgets and services it works with (never the window) and makes its own actions:

- ``main_window``: builds the widgets and the controllers, places their actions in the
  menus; drag and drop, geometry, shutdown;
- ``chat_controller``: the replies (send, regenerate, stop, abandon) and their signals;
- ``history_controller`` (with ``history_files`` and ``import_task``): the chats kept
  in the history store, the conversation sidebar, export and import;
- ``compare_controller``: Compare and Stats on each reply;
- ``settings_controller``: the settings in force and on disk, the settings dialog;
- ``model_loading``: the load banner, the model line, the crash-loop guard;
- ``help_controller``: Check speculation, the log folder, About.
- ``server_controller``: File → Local server…, the API served with the window's models.

See docs/ARCHITECTURE.md, "The window".
"""
