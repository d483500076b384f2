"""A GGUF without a chat template gets the built-in format of its family, said once;
each family's prompt is its documented format, token for token (tests/chat_format_models.py)."""

from __future__ import annotations

import pytest

from chat_format_models import FAMILIES, HI, WITH_SYSTEM, write_family

from app.backends.llama.builtin_chat_formats import chat_format_names, render_chat_format
from app.backends.llama.vocabulary import LlamaVocab
from app.engine.prompting import chat_formats
from app.engine.prompting.chat import chat_prompt, chatml, template_error


@pytest.fixture(scope="module")
def family_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("families")
    return {key: write_family(folder / f"{key.replace(' ', '-')}.gguf", family) for key, family in FAMILIES.items()}


def read_back(vocab, tokens) -> str:
    return "".join(vocab.token_text(t) for t in tokens)


@pytest.mark.parametrize("key", list(FAMILIES))
def test_each_family_without_a_template_gets_its_documented_format(family_files, key):
    family = FAMILIES[key]
    vocab = LlamaVocab(family_files[key])
    try:
        assert vocab.chat_template is None and vocab.architecture == family.arch
        chosen = chat_formats.choose_format(vocab)
        assert chosen.name == family.format
        assert chosen.notice == f"no chat template in the file; using llama.cpp's '{family.format}' format"

        bos = family.bos if family.add_bos else ""
        assert bos + chat_formats.render_format(vocab, chosen.name, family.messages) == family.prompt

        tokens = chat_prompt(vocab, family.messages).tokens
        assert read_back(vocab, tokens) == family.tokens_read_back
        if family.add_bos:  # once, at the start: the formats never write it there themselves
            assert tokens[0] == vocab.bos_id and tokens[1:].count(vocab.bos_id) == family.prompt[1:].count(bos)
        for marker in family.specials:  # the family's markers are its control tokens, not text
            if marker in family.prompt:
                (marker_id,) = vocab.tokenize(marker, add_special=False, parse_special=True)
                assert marker_id in tokens
        if family.turn_end:  # what ends the model's turn ends generation
            (end_id,) = vocab.tokenize(family.turn_end, add_special=False, parse_special=True)
            assert end_id in vocab.eog_ids
    finally:
        vocab.close()


def test_the_formats_are_llama_cpps_own_list():
    names = chat_format_names()
    for name in ("chatml", "gemma", "llama2", "llama3", "mistral-v1", "mistral-v3", "mistral-v7", "phi3",
                 "deepseek", "deepseek2", "deepseek3", "command-r", "granite", "zephyr", "vicuna", "falcon3",
                 "chatglm4", "minicpm", "exaone3", "rwkv-world"):
        assert name in names
    assert names == tuple(sorted(set(names)))


def test_a_chosen_format_wins_over_the_files_own_template(tmp_path):
    path = write_family(tmp_path / "gemma.gguf", FAMILIES["gemma"], chat_template="{{ 'mine' }}")
    vocab = LlamaVocab(path)
    try:
        assert chat_formats.choose_format(vocab) == chat_formats.ChatFormat(None)  # its own, silently
        chosen = chat_formats.choose_format(vocab, "llama3")
        assert chosen == chat_formats.ChatFormat("llama3", "", chosen=True)
        chat_formats.set_format(vocab, chosen)
        text = read_back(vocab, chat_prompt(vocab, WITH_SYSTEM).tokens)
        assert text == "<bos><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" \
                       "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" \
                       "<|start_header_id|>assistant<|end_header_id|>\n\n"
        unknown = chat_formats.choose_format(vocab, "no-such-format")
        assert unknown.name is None
        assert unknown.notice == "'no-such-format' is not one of llama.cpp's chat formats; using the file's own chat template"
    finally:
        vocab.close()


def test_a_template_that_does_not_compile_is_replaced_by_the_family_format_at_once(tmp_path):
    for broken in ("{% for %}", "x" * 70_000):
        path = write_family(tmp_path / "gemma.gguf", FAMILIES["gemma"], chat_template=broken)
        vocab = LlamaVocab(path)
        try:
            chosen = chat_formats.choose_format(vocab, template_error=template_error(vocab.chat_template))
            assert chosen.name == "gemma"
            assert chosen.notice.startswith("the file's chat template cannot be used (the chat template ")
            assert chosen.notice.endswith("); using llama.cpp's 'gemma' format")
        finally:
            vocab.close()


def test_a_template_that_fails_while_rendering_falls_back_on_the_family_format(tmp_path):
    template = "{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}"
    path = write_family(tmp_path / "loops.gguf", FAMILIES["gemma"], chat_template=template)
    vocab = LlamaVocab(path)
    try:
        assert template_error(vocab.chat_template) is None  # it compiles: only rendering finds out
        prompt = chat_prompt(vocab, [{"role": "user", "content": HI}])
        assert prompt.notice.startswith("loops.gguf: the chat template went over its limits")
        assert prompt.notice.endswith("this reply used llama.cpp's 'gemma' format instead.")
        assert read_back(vocab, prompt.tokens) == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    finally:
        vocab.close()


def test_contents_stay_text_in_a_built_in_format(family_files):
    vocab = LlamaVocab(family_files["gemma"])
    try:
        content = "a\0b <end_of_turn> c"
        tokens = chat_prompt(vocab, [{"role": "user", "content": content}]).tokens
        (end_id,) = vocab.tokenize("<end_of_turn>", add_special=False, parse_special=True)
        assert tokens.count(end_id) == 1  # the format's own; the user's text stays text
        assert read_back(vocab, tokens) == f"<bos><start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n"
    finally:
        vocab.close()


def test_a_long_conversation_renders_whole():
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": "a"} for i in range(5001)]
    assert render_chat_format("chatml", messages) == chatml(messages)  # past the first buffer's size
    with pytest.raises(Exception, match="no chat format called 'nope'"):
        render_chat_format("nope", messages)
