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
- ``help_controller``: Check speculation, the log folder, About;
- ``server_controller``: File → Local server…, the API served with the window's models;
- ``engine_controller``: the engine process's death or hang, and Restart engine;
- ``steering``: installs the library, branch (edit, ‹ 2/3 ›), preset and first-run
  controllers.

``ChatController(client, chat_view, stats, notices, settings=…, say=…)`` reports the
replies as signals (``conversation_cleared``, ``user_message_added``, ``reply_started``,
``reply_tokens``, ``reply_finished``, ``reply_removed``; every started reply ends with
``reply_finished``, also when cut off). The history, Compare and help controllers
listen to those signals and to the client and make their own ``QAction``s (``actions``,
or ``file_actions`` / ``chat_actions``), which the window places in ``_build_menus``.

Where a feature goes:

- **A menu action**: made in the controller that does the work (a ``QAction`` parented
  to the controller), exposed in its ``actions``, and its group added to a ``fill(...)``
  line in ``MainWindow._build_menus``; ``self.addActions(...)`` there keeps its shortcut
  working with the menu bar hidden.
- **A per-reply button**: ``chat_view.add_reply_action(label, tooltip, handler)``.
- **A side-panel widget**: a display-only widget in ``app/ui/``, added as a (title,
  widget) section in ``app/ui/side_panel.py``; the controller that has the data feeds it.
- **A settings page or field**: the field in ``app/storage/settings.py`` (``Settings``,
  with its description), its editor in ``app/ui/settings_dialog.py`` (``PAGES``); it
  applies through ``SettingsController.changed``, which the window follows in
  ``_settings_applied``.
- **A feature that follows the chat**: a ``QObject`` controller here connected to
  ``ChatController``'s signals; widget-free logic goes to ``app/session/`` (as Compare's
  figures in ``app/session/compare.py``) so other front ends can use it.
"""
