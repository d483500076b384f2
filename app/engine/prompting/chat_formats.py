"""Which chat format a model's prompts take: the file's own template, or one of
llama.cpp's built-in formats (``llama_chat_builtin_templates``) by name.

Many GGUF files carry no ``tokenizer.chat_template`` (base models, older conversions,
merges). Sending ChatML to a Gemma then makes it answer with ``<|im_end|>``. So a file
without a template gets the built-in format that fits it, judged like a person would:

1. its architecture, where one architecture means one format (``gemma3`` -> gemma);
2. else the control tokens of its vocabulary: a format's turn markers must be whole
   control tokens of the file (``<|start_header_id|>`` -> llama3), since a marker the
   tokenizer splits into text is noise to the model;
3. else words of its name (``mistral``, ``vicuna``, ``llama-2``, ...);
4. else ChatML. Whatever is chosen, one line says so
   ("no chat template in the file; using llama.cpp's 'gemma' format").

The user may choose a format per file instead (``ChatSession.set_chat_format``); a
template that does not compile falls back the same way, also said once, and one that
fails while rendering falls back for that reply (``app.engine.prompting.chat``).

Rendering a built-in format is llama.cpp's own code (``llama_chat_apply_template``,
reached through the model: ``render_chat_format``), so a prompt is exactly what
``llama-server --chat-template NAME`` would build. Those formats never write the BOS
at the start; the prompter adds it when the vocabulary asks for one. The backend's
``render_chat_format`` is model-free (its messages are C strings, so a NUL in a content
travels as a marker) and ``available_formats`` lists what it offers, so this module stays
pure and a backend without them renders ChatML in plain Python.

Which format a model uses is decided once per load (``ChatSession.set_chat_format``,
called by ``app/session/loading.py`` with ``ModelSpec.chat_format``, the user's choice
per file: ``Settings.chat_formats``, ``--chat-format``) and kept per model
(``set_format`` / ``format_of``); the prompter reads it for every render, and message
contents are guarded as text in both paths. Detection reads only the vocabulary
(``tokenize``, ``token_text``, ``token_bytes``) and a few facts (``architecture``,
``name``, ``tokenizer_pre``, the file's name), so a vocabulary-only load (no weights)
can judge a file; the tests write one
small GGUF per family (tests/chat_format_models.py) and check each prompt against the
family's documented format, token for token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence
from weakref import WeakKeyDictionary

FILE_OWN = ""          # the setting's value for "the file's own template"
FALLBACK = "chatml"    # when nothing fits

# Architectures with one format, whatever the file's name (llama.cpp's LLM_ARCH names).
# A value that is a tuple: the first whose markers the vocabulary has, else the last.
_ARCHITECTURES: dict[str, str | tuple[str, ...]] = {
    **dict.fromkeys(("gemma", "gemma2", "gemma3", "gemma3n"), "gemma"),
    **dict.fromkeys(("phi3", "phimoe"), ("phi4", "phi3")),
    **dict.fromkeys(("command-r", "cohere2"), "command-r"),
    **dict.fromkeys(("granite", "granitemoe"), "granite"),
    "granitehybrid": "granite-4.0",
    "llama4": "llama4",
    **dict.fromkeys(("deepseek", "deepseek2"), ("kimi-k2", "deepseek3", "deepseek2")),
    "chatglm": ("chatglm4", "chatglm3"),
    "glm4": "chatglm4",
    "minicpm": ("minicpm", "chatml"),
    "exaone": "exaone3", "exaone4": "exaone4", "exaone-moe": "exaone-moe",
    **dict.fromkeys(("rwkv6", "rwkv7"), "rwkv-world"),
    "orion": "orion",
    "bailingmoe": "bailing", "bailingmoe2": "bailing2",
    "hunyuan-moe": "hunyuan-moe", "hunyuan-dense": "hunyuan-dense",
    "gpt-oss": "gpt-oss", "seed_oss": "seed_oss", "grok": "grok-2", "pangu-embedded": "pangu-embedded",
    "mistral3": "mistral-v7",
}

# Format -> the control tokens its prompts are made of; tried in this order (a more
# specific set before one it contains: phi4 before chatml, phi3 before zephyr).
MARKERS: dict[str, tuple[str, ...]] = {
    "llama4": ("<|header_start|>", "<|header_end|>", "<|eot|>"),
    "llama3": ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    "gemma": ("<start_of_turn>", "<end_of_turn>"),
    "phi4": ("<|im_start|>", "<|im_sep|>", "<|im_end|>"),
    "kimi-k2": ("<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"),
    "chatml": ("<|im_start|>", "<|im_end|>"),
    "command-r": ("<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"),
    "granite": ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"),
    "deepseek3": ("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
    "mistral-v7": ("[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]"),
    "mistral-v3": ("[INST]", "[/INST]"),
    "gpt-oss": ("<|start|>", "<|message|>", "<|channel|>", "<|end|>"),
    "phi3": ("<|user|>", "<|assistant|>", "<|end|>"),
    "chatglm4": ("[gMASK]", "<sop>", "<|user|>", "<|assistant|>"),
    "chatglm3": ("[gMASK]", "sop", "<|user|>", "<|assistant|>"),
    "zephyr": ("<|user|>", "<|assistant|>", "<|endoftext|>"),
    "exaone3": ("[|system|]", "[|assistant|]", "[|endofturn|]"),
    "minicpm": ("<用户>", "<AI>"),
    "megrez": ("<|role_start|>", "<|role_end|>", "<|turn_end|>"),
    "seed_oss": ("<seed:bos>", "<seed:eos>"),
    "hunyuan-dense": ("<｜hy_User｜>", "<｜hy_Assistant｜>"),
    "deepseek": ("<|EOT|>",),
    "openchat": ("<|end_of_turn|>",),
}

# Words of a model's name (general.name and file name, lower case) -> a format; for
# families whose turns are plain text, so no marker finds them. Tried in this order.
_NAMES: tuple[tuple[str, str], ...] = (
    (r"llama[-_ ]?2", "llama2-sys-bos"),
    (r"mistral|mixtral", "mistral-v1"),
    (r"vicuna.*orca|orca.*vicuna", "vicuna-orca"),
    (r"vicuna", "vicuna"),
    (r"deepseek.*coder", "deepseek"),
    (r"deepseek", "deepseek2"),
    (r"falcon[-_ ]?3", "falcon3"),
    (r"monarch", "monarch"),
    (r"orion", "orion"),
    (r"gigachat", "gigachat"),
    (r"yandex", "yandex"),
    (r"rwkv", "rwkv-world"),
)
# Names that outweigh the vocabulary's markers: Falcon 3's <|user|> and <|endoftext|>
# would otherwise read as zephyr.
_NAMES_FIRST = frozenset({"falcon3"})
_TEKKEN = {"mistral-v3": "mistral-v3-tekken", "mistral-v7": "mistral-v7-tekken"}


@dataclass(frozen=True)
class ChatFormat:
    """How this model's prompts are written: ``name`` None renders the file's own
    template; otherwise a llama.cpp built-in format. ``notice``: one line for the user
    when it is not the file's template nor the user's choice (empty otherwise)."""

    name: str | None
    notice: str = ""
    chosen: bool = False   # the user chose it (per file, or --chat-format)


def format_words(name: str) -> str:
    return f"llama.cpp's '{name}' format"


def available_formats(model) -> tuple[str, ...]:
    """The built-in format names this model's backend can render (none for a backend
    without llama.cpp's formats, which then renders ChatML itself)."""
    return tuple(getattr(model, "chat_formats", ()) or ())


def detect_format(model) -> str | None:
    """The built-in format that fits a model with no usable template, or None."""
    available = set(available_formats(model)) or {FALLBACK}
    has = _control_tokens(model)
    pre = (getattr(model, "tokenizer_pre", "") or "").lower()

    def fits(name: str) -> bool:
        return all(has(marker) for marker in MARKERS.get(name, ()))

    def variant(name: str) -> str:
        tekken = _TEKKEN.get(name) if pre == "tekken" else None
        return tekken if tekken in available else name

    words = " ".join(str(w) for w in (getattr(model, "name", ""), _file_name(model)) if w).lower()
    by_name = next((name for pattern, name in _NAMES if re.search(pattern, words)), None)
    choice = _ARCHITECTURES.get((getattr(model, "architecture", "") or "").lower())
    if isinstance(choice, tuple):
        choice = next((name for name in choice[:-1] if fits(name)), choice[-1])
    if choice is None and by_name in _NAMES_FIRST:
        choice = by_name
    if choice is None:
        choice = next((name for name in MARKERS if fits(name)), by_name)
    if choice is None:
        return None
    choice = variant(choice)
    return choice if choice in available else None


def choose_format(model, chosen: str = FILE_OWN, *, template_error: str | None = None) -> ChatFormat:
    """The format for ``model``: ``chosen`` when it names a built-in format; else the
    file's own template when it has one that compiles (``template_error`` says why not);
    else the one that fits (``detect_format``), or ChatML; a notice says so."""
    available = available_formats(model) or (FALLBACK,)
    if chosen and chosen in available:
        return ChatFormat(chosen, chosen=True)
    prefix = f"'{chosen}' is not one of llama.cpp's chat formats; " if chosen else ""
    if getattr(model, "chat_template", None) and template_error is None:
        return ChatFormat(None, prefix + "using the file's own chat template" if prefix else "")
    name = detect_format(model) or FALLBACK
    why = (f"the file's chat template cannot be used ({_lower_first(template_error)})"
           if getattr(model, "chat_template", None) else "no chat template in the file")
    return ChatFormat(name, f"{prefix}{why}; using {format_words(name)}")


def fallback_format(model) -> str:
    """The built-in format a reply falls back on when the file's template fails."""
    return detect_format(model) or FALLBACK


# --- the format in force per model --------------------------------------------------------

_in_force: WeakKeyDictionary = WeakKeyDictionary()


def set_format(model, chat_format: ChatFormat) -> None:
    """Use ``chat_format`` for every later prompt of ``model``."""
    try:
        _in_force[model] = chat_format
    except TypeError:  # a model object that takes no weak references
        setattr(model, "_tandem_chat_format", chat_format)


def format_of(model) -> ChatFormat:
    """The format in force; a model never given one takes ``choose_format``'s default."""
    try:
        found = _in_force.get(model)
    except TypeError:
        found = getattr(model, "_tandem_chat_format", None)
    if found is None:
        found = choose_format(model)
        set_format(model, found)
    return found


def render_format(model, name: str, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
    """A conversation in the built-in format ``name`` (ChatML in plain Python for a
    backend without llama.cpp's formats)."""
    render: Callable | None = getattr(model, "render_chat_format", None)
    if render is None or name not in available_formats(model):
        text = "".join(f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")
    return render(name, messages, add_generation_prompt)


def _control_tokens(model) -> Callable[[str], bool]:
    """text -> whether the vocabulary holds it as one control token (remembered)."""
    known: dict[str, bool] = {}

    def has(text: str) -> bool:
        if text not in known:
            known[text] = _is_control_token(model, text)
        return known[text]
    return has


def _is_control_token(model, text: str) -> bool:
    try:
        ids = model.tokenize(text, add_special=False, parse_special=True)
        if len(ids) != 1:
            return False
        # A control token's text shows only when specials are rendered: its plain bytes differ.
        return model.token_text(ids[0]) == text and model.token_bytes(ids[0]) != text.encode("utf-8")
    except Exception:  # noqa: BLE001 — a tokenizer that refuses the text has no such token
        return False


def _file_name(model) -> str:
    path = getattr(model, "path", None)
    return str(path).rsplit("/", 1)[-1] if path else ""


def _lower_first(text: str | None) -> str:
    text = (text or "").rstrip(".")
    return text[:1].lower() + text[1:]
