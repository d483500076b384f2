"""A model's vocabulary as llama.cpp reads it: tokenizing, each token's text, the
special ids and the file's names; and ``LlamaVocab``, that vocabulary alone.

``LlamaBackend`` and ``LlamaVocab`` read the vocabulary the same way, so both take it
from ``VocabularyReader``: a ``vocab_only`` load (no weights read) can judge a model's
chat format (``app.engine.prompting.chat_formats``) exactly as the loaded model would
tokenize it.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Sequence

import llama_cpp as ll

from app.backends.llama import log_capture
from app.backends.llama.backend_error import BackendError
from app.backends.llama.builtin_chat_formats import chat_format_names, render_chat_format
from app.backends.llama.process_setup import ensure_initialised
from app.engine.errors import ModelFileError
from app.engine.gguf.header import shown_name
from app.engine.gguf.model_file import ModelFile, open_model_file


class VocabularyReader:
    """The vocabulary part of ``engine.backend.ModelBackend``, over a loaded ``_model``
    (a ``llama_model *``), its ``_vocab`` and a ``_piece_cache`` dict the class sets up."""

    _model: object
    _vocab: object
    _piece_cache: dict[int, bytes]
    n_vocab: int

    def _read_vocabulary(self, path: Path) -> None:
        """What the engine reads of the vocabulary and the file's names."""
        self.bos_id = ll.llama_vocab_bos(self._vocab)
        self.eos_id = ll.llama_vocab_eos(self._vocab)
        self.add_bos = bool(ll.llama_vocab_get_add_bos(self._vocab))
        self.eog_ids = frozenset(t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self._vocab, t))
        template = ll.llama_model_chat_template(self._model, None)
        self.chat_template = template.decode("utf-8") if template else None
        self.name = self._meta("general.name") or Path(shown_name(path)).stem
        self.architecture = self._meta("general.architecture") or ""
        self.tokenizer_pre = self._meta("tokenizer.ggml.pre") or ""

    @property
    def vocab_handle(self):
        """llama.cpp's ``llama_vocab *`` of this model, for what builds on it in this
        package (a grammar sampler, ``grammar.GrammarConstraint``); valid while it is loaded."""
        return self._vocab

    @property
    def chat_formats(self) -> tuple[str, ...]:
        return chat_format_names()

    @staticmethod
    def render_chat_format(name: str, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        return render_chat_format(name, messages, add_generation_prompt)

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (ll.llama_token * capacity)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:  # too small a buffer: -n is the size it needs
            capacity = -n
            buf = (ll.llama_token * capacity)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            raise BackendError("llama.cpp could not tokenize the text")
        return list(buf[:n])

    def token_bytes(self, token_id: int) -> bytes:
        piece = self._piece_cache.get(token_id)
        if piece is None:
            piece = self._piece_cache[token_id] = self._piece(token_id, special=False)
        return piece

    def token_text(self, token_id: int) -> str:
        return self.token_piece(token_id).decode("utf-8", errors="replace")

    def token_piece(self, token_id: int) -> bytes:
        """The token's bytes with control tokens written out (``<|im_end|>``, not nothing):
        the text llama.cpp's grammar matches a token against."""
        return self._piece(token_id, special=True)

    def _piece(self, token_id: int, *, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, special)
        if n < 0:  # too small a buffer: -n is the size it needs
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, special)
        return buf.raw[:max(n, 0)]

    def _meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(512)
        n = ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None


class LlamaVocab(VocabularyReader):
    """A model file's tokenizer alone (llama.cpp's ``vocab_only`` load, no weights read):
    enough to judge its chat format (``app.engine.prompting.chat_formats``) without loading it."""

    def __init__(self, path: str | Path | ModelFile) -> None:
        path = Path(path)
        self.model_file = open_model_file(path)
        ensure_initialised()
        self.path = path
        params = ll.llama_model_default_params()
        params.vocab_only = True
        log_capture.clear_errors()
        self._model = ll.llama_model_load_from_file(os.fsencode(path), params)
        if not self._model:
            raise ModelFileError(f"{shown_name(path)}: llama.cpp could not read the vocabulary "
                                 f"({log_capture.last_error()})")
        self._vocab = ll.llama_model_get_vocab(self._model)
        self._piece_cache: dict[int, bytes] = {}
        self.n_vocab = ll.llama_vocab_n_tokens(self._vocab)
        self._read_vocabulary(path)

    def close(self) -> None:
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:  # a safety net; owners call close()
        try:
            self.close()
        except Exception:
            pass
