"""A model file's chat format: "the file's own template" or one of llama.cpp's built-in
formats, remembered per file (the settings dialog's Models page, the model library).

Display and emit only: it holds the choices it was given ([path, name] pairs, as the
``chat_formats`` setting keeps them), shows the one of the file it is set to, and
returns them with the user's change.
"""

from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QWidget

FILE_OWN_LABEL = "The file's own template"


class ChatFormatChooser(QComboBox):
    chosen = Signal(str, str)  # model path, format name ('' : the file's own); only on the user's change

    def __init__(self, names: Sequence[str] = (), parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._choices: dict[str, str] = {}
        self._path = ""
        self._updating = False
        self.set_names(names)
        self.currentIndexChanged.connect(self._changed)

    def set_names(self, names: Sequence[str]) -> None:
        """The formats on offer (llama.cpp's list), after "the file's own"."""
        self._updating = True
        self.clear()
        self.addItem(FILE_OWN_LABEL, "")
        for name in names:
            self.addItem(name, name)
        self._updating = False
        self._show()

    def set_choices(self, pairs: Sequence[Sequence[str]]) -> None:
        self._choices = {path: name for path, name in pairs}
        self._show()

    def choices(self) -> tuple[tuple[str, str], ...]:
        return tuple(self._choices.items())

    def set_model(self, path: str) -> None:
        """Show (and from now on change) the format of the file at ``path``."""
        self._path = path
        self._show()

    def model(self) -> str:
        return self._path

    def current_format(self) -> str:
        return self.currentData() or ""

    def _show(self) -> None:
        name = self._choices.get(self._path, "")
        index = self.findData(name)
        if index < 0:  # a format this llama.cpp does not know (a newer one wrote it): kept, shown
            self._updating = True
            self.addItem(f"{name} (unknown to this llama.cpp)", name)
            self._updating = False
            index = self.count() - 1
        self._updating = True
        self.setCurrentIndex(index)
        self._updating = False

    def _changed(self, _index: int) -> None:
        if self._updating:
            return
        name = self.current_format()
        self._choices.pop(self._path, None)
        if name:
            self._choices[self._path] = name
        self.chosen.emit(self._path, name)
