"""Tests of app.engine.gguf.header and app.engine.gguf.meta: header validation, metadata, draft compatibility.

All files are real GGUF files written to tmp_path (by gguf.GGUFWriter, or byte by
byte for the broken ones); nothing is mocked.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from app.engine.errors import ModelFileError
from app.engine.gguf.header import validate_gguf
from app.engine.gguf.meta import Compatibility, ModelMetadata, check_compatibility, read_metadata

# tests/gguf_factory.py: shared by the tests that write GGUF files (tests/ is on sys.path).
from gguf_factory import T, gstr, kv, make_tokens, raw_gguf, tensor_info, u32, u64, write_vocab_gguf

F32, Q4_0 = 0, 2


def write(tmp_path: Path, data: bytes, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def refused(path: Path, *fragments: str) -> str:
    """Assert validation refuses ``path`` with a one-line message naming the file and each fragment."""
    with pytest.raises(ModelFileError) as info:
        validate_gguf(path)
    message = str(info.value)
    assert message.startswith(path.name + ":"), message
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def meta(tmp_path: Path, stem: str, **kw) -> ModelMetadata:
    return read_metadata(write_vocab_gguf(tmp_path / f"{stem}.gguf", **kw))


# ---------------------------------------------------------------------------
# Compatibility (app/engine/gguf/meta.py, check_compatibility)


def test_same_file_twice_is_compatible(tmp_path):
    m = meta(tmp_path, "a")
    result = check_compatibility(m, read_metadata(m.path))
    assert result == Compatibility(True, None, "Draft is compatible with target.")


def test_compatible_pair_within_the_rules(tmp_path):
    # Ids below 5 may differ, and so may the size (by up to 128) and the extra tail.
    target_tokens = make_tokens(300)
    draft_tokens = ["a", "b", "c", "d", "e"] + target_tokens[5:172]
    target = meta(tmp_path, "t", tokens=target_tokens)
    draft = meta(tmp_path, "d", tokens=draft_tokens)
    assert draft.n_vocab == 300 - 128
    assert check_compatibility(target, draft).ok
    assert check_compatibility(draft, target).ok


def test_vocab_type_rule(tmp_path):
    target = meta(tmp_path, "t", vocab_type="gpt2")
    draft = meta(tmp_path, "d", vocab_type="llama", add_bos=False)
    result = check_compatibility(target, draft)
    assert not result.ok and result.rule == "vocab_type"
    assert result.reason == "Draft is incompatible with target: tokenizer types differ (target 'gpt2', draft 'llama')"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"add_bos": True}, "add-BOS flags differ (target False, draft True)"),
        ({"add_eos": True}, "add-EOS flags differ (target False, draft True)"),
        ({"bos_id": 0}, "BOS token ids differ (target 1, draft 0)"),
        ({"eos_id": 7}, "EOS token ids differ (target 2, draft 7)"),
        ({"eos_id": None}, "EOS token ids differ (target 2, draft None)"),
    ],
)
def test_special_tokens_rule(tmp_path, changes, expected):
    target = meta(tmp_path, "t")
    draft = meta(tmp_path, "d", **changes)
    result = check_compatibility(target, draft)
    assert not result.ok and result.rule == "special_tokens"
    assert result.reason == f"Draft is incompatible with target: {expected}"


def test_vocab_size_rule(tmp_path):
    target = meta(tmp_path, "t", tokens=make_tokens(1152))
    draft = meta(tmp_path, "d", tokens=make_tokens(128))
    result = check_compatibility(target, draft)
    assert not result.ok and result.rule == "vocab_size"
    assert result.reason == (
        "Draft is incompatible with target: vocabulary sizes differ by 1024 "
        "(target 1152, draft 128; at most 128 allowed)"
    )


@pytest.mark.parametrize(("draft_size", "ok"), [(172, True), (171, False), (428, True), (429, False)])
def test_vocab_size_limit_is_128(tmp_path, draft_size, ok):
    target = meta(tmp_path, "t", tokens=make_tokens(300))
    draft = meta(tmp_path, "d", tokens=make_tokens(draft_size))
    assert check_compatibility(target, draft).ok is ok


def test_token_text_rule_names_first_differing_id(tmp_path):
    tokens = make_tokens(200)
    changed = list(tokens)
    changed[77] = "other"
    changed[150] = "later"
    target = meta(tmp_path, "t", tokens=tokens)
    draft = meta(tmp_path, "d", tokens=changed)
    result = check_compatibility(target, draft)
    assert not result.ok and result.rule == "token_text"
    assert result.reason == "Draft is incompatible with target: token 77 differs (target 'tok77', draft 'other')"


def test_token_text_rule_starts_at_id_5(tmp_path):
    tokens = make_tokens(50)
    target = meta(tmp_path, "t", tokens=tokens)
    early = meta(tmp_path, "early", tokens=["x0", "x1", "x2", "x3", "x4"] + tokens[5:])
    at_five = meta(tmp_path, "five", tokens=tokens[:5] + ["x5"] + tokens[6:])
    assert check_compatibility(target, early).ok
    result = check_compatibility(target, at_five)
    assert result.rule == "token_text" and "token 5 differs (target 'tok5', draft 'x5')" in result.reason


def test_token_texts_compare_as_bytes(tmp_path):
    # Invalid UTF-8 must neither crash nor make two different tokens look equal.
    tokens = make_tokens(20)
    target = meta(tmp_path, "t", tokens=tokens[:10] + [b"\xff"] + tokens[11:])
    draft = meta(tmp_path, "d", tokens=tokens[:10] + [b"\xfe"] + tokens[11:])
    result = check_compatibility(target, draft)
    assert result.rule == "token_text" and "token 10 differs" in result.reason
    assert check_compatibility(target, read_metadata(target.path)).ok


def test_first_failing_rule_is_reported(tmp_path):
    target = meta(tmp_path, "t", tokens=make_tokens(1000))
    draft = meta(tmp_path, "d", tokens=make_tokens(10), vocab_type="llama", add_bos=True)
    assert check_compatibility(target, draft).rule == "vocab_type"


# ---------------------------------------------------------------------------
# Metadata


def test_reads_metadata(tmp_path):
    tokens = make_tokens(100)
    path = write_vocab_gguf(
        tmp_path / "m.gguf", tokens, vocab_type="gpt2", bos_id=1, eos_id=2, add_bos=False, add_eos=False,
        arch="llama", name="Tiny Model", chat_template="{{ x }}", context_length=4096, file_type=3,
    )
    m = read_metadata(path)
    assert m.path == path
    assert m.architecture == "llama"
    assert m.name == "Tiny Model"
    assert m.vocab_type == "gpt2"
    assert m.tokens == tuple(tokens) and m.n_vocab == 100
    assert (m.bos_id, m.eos_id, m.add_bos, m.add_eos) == (1, 2, False, False)
    assert m.chat_template == "{{ x }}"
    assert m.context_length == 4096
    assert m.file_type == 3 and m.file_type_name == "Q4_1"
    assert m.file_size == path.stat().st_size
    assert "tok5" not in repr(m)  # the vocabulary stays out of logs


def test_absent_keys(tmp_path):
    m = meta(tmp_path, "bare", bos_id=None, eos_id=None, name=None)
    assert (m.bos_id, m.eos_id) == (None, None)
    assert m.name == "bare"  # the file stem
    assert m.chat_template is None and m.context_length is None
    assert m.file_type is None and m.file_type_name is None


@pytest.mark.parametrize(
    ("vocab_type", "pre", "add_bos", "add_eos"),
    [
        ("llama", None, True, False),      # SentencePiece
        ("gpt2", None, False, False),      # BPE
        ("gpt2", "smollm", False, False),
        ("gpt2", "llama-bpe", True, False),  # Llama 3 style BPE
        ("t5", None, False, True),
        ("bert", None, True, False),
    ],
)
def test_add_bos_add_eos_defaults_follow_llama_cpp(tmp_path, vocab_type, pre, add_bos, add_eos):
    m = meta(tmp_path, "m", vocab_type=vocab_type, pre=pre, add_bos=None, add_eos=None)
    assert (m.add_bos, m.add_eos) == (add_bos, add_eos)


def test_explicit_flags_override_defaults(tmp_path):
    m = meta(tmp_path, "m", vocab_type="llama", add_bos=False, add_eos=True)
    assert (m.add_bos, m.add_eos) == (False, True)


def test_no_vocabulary_is_refused(tmp_path):
    path = write_vocab_gguf(tmp_path / "novocab.gguf", tokens=[])
    with pytest.raises(ModelFileError, match=r"^novocab\.gguf: has no tokenizer vocabulary"):
        read_metadata(path)


def test_no_tokenizer_model_is_refused(tmp_path):
    path = write_vocab_gguf(tmp_path / "m.gguf", vocab_type=None)
    with pytest.raises(ModelFileError, match=r"^m\.gguf: has no tokenizer type"):
        read_metadata(path)


def test_wrongly_typed_key_is_refused(tmp_path):
    tokens = kv("tokenizer.ggml.tokens", T.ARRAY, u32(T.STRING) + u64(6) + b"".join(gstr(t) for t in "abcdef"))
    path = write(tmp_path, raw_gguf([
        kv("tokenizer.ggml.model", T.STRING, gstr("gpt2")),
        tokens,
        kv("tokenizer.ggml.bos_token_id", T.STRING, gstr("1")),
    ]))
    with pytest.raises(ModelFileError, match=r"'tokenizer.ggml.bos_token_id' is not an integer"):
        read_metadata(path)


def test_read_metadata_validates_first(tmp_path):
    path = write(tmp_path, b"GGUF" + u32(3) + u64(0) + u64(1) + kv("k", T.ARRAY, u32(T.UINT64) + u64(2**63)))
    started = time.monotonic()
    with pytest.raises(ModelFileError, match="declares 9223372036854775808 elements"):
        read_metadata(path)
    assert time.monotonic() - started < 1.0


# ---------------------------------------------------------------------------
# Header validation: good files


def test_valid_file_with_tensor(tmp_path):
    path = write_vocab_gguf(tmp_path / "m.gguf", tensor=True)
    header = validate_gguf(path)
    assert (header.version, header.n_tensors, header.alignment) == (3, 1, 32)
    assert header.data_offset % 32 == 0
    assert header.data_offset + header.data_size == header.file_size == path.stat().st_size


def test_version_2_is_accepted(tmp_path):
    validate_gguf(write(tmp_path, raw_gguf([kv("a", T.UINT8, b"\x01")], version=2)))


def test_nested_array_is_walked(tmp_path):
    inner = u32(T.UINT16) + u64(2) + b"\x01\x00\x02\x00"
    nested = kv("n", T.ARRAY, u32(T.ARRAY) + u64(2) + inner + inner)
    header = validate_gguf(write(tmp_path, raw_gguf([nested, kv("after", T.INT8, b"\x05")])))
    assert header.n_kv == 2


# ---------------------------------------------------------------------------
# Header validation: bad input


def test_missing_path(tmp_path):
    refused(tmp_path / "nope.gguf", "does not exist")


def test_directory(tmp_path):
    d = tmp_path / "models.gguf"
    d.mkdir()
    refused(d, "is a directory")


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root and Windows ignore mode bits")
def test_unreadable_file(tmp_path):
    path = write_vocab_gguf(tmp_path / "m.gguf")
    path.chmod(0)
    try:
        refused(path, "cannot be read", "permission denied")
    finally:
        path.chmod(0o644)


def test_text_file(tmp_path):
    refused(write(tmp_path, b"hello world, not a model\n", "notes.gguf"), "is not a GGUF file", "b'hello wo'")


def test_git_lfs_pointer(tmp_path):
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n"
    refused(write(tmp_path, pointer), "Git LFS pointer")


def test_empty_file(tmp_path):
    refused(write(tmp_path, b""), "is empty")


def test_only_magic(tmp_path):
    refused(write(tmp_path, b"GGUF"), "header is truncated")


def test_every_truncation_is_refused(tmp_path):
    whole = write_vocab_gguf(tmp_path / "whole.gguf", tokens=make_tokens(40), tensor=True).read_bytes()
    validate_gguf(tmp_path / "whole.gguf")
    path = tmp_path / "cut.gguf"
    started = time.monotonic()
    for cut in range(len(whole)):
        path.write_bytes(whole[:cut])
        refused(path)
    assert time.monotonic() - started < 10.0


def test_corrupted_bytes_give_model_file_error_or_pass(tmp_path):
    # Seeded, so deterministic: random byte damage anywhere in a real file must end
    # in ModelFileError (or, where the damage is harmless, a normal read), never in
    # another exception. 20000 rounds of this found nothing; 300 keep it quick.
    import random

    whole = write_vocab_gguf(
        tmp_path / "whole.gguf", tokens=make_tokens(40), tensor=True, chat_template="hi", context_length=64
    ).read_bytes()
    rng = random.Random(1234)
    path = tmp_path / "damaged.gguf"
    for _ in range(300):
        data = bytearray(whole)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.choice([0, 1, 8, 9, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        path.write_bytes(data)
        try:
            read_metadata(path)
        except ModelFileError as exc:
            assert str(exc).startswith("damaged.gguf: ") and "\n" not in str(exc)


@pytest.mark.parametrize(("version", "fragment"), [(1, "version 1"), (99, "version 99"), (0, "version 0")])
def test_unsupported_versions(tmp_path, version, fragment):
    message = refused(write(tmp_path, raw_gguf(version=version)), fragment)
    if version != 1:
        assert "only versions 2 and 3 are supported" in message


def test_big_endian_file(tmp_path):
    data = b"GGUF" + (3).to_bytes(4, "big") + (0).to_bytes(8, "big") * 2
    refused(write(tmp_path, data), "big-endian")


def test_huge_array_fails_fast(tmp_path):
    data = b"GGUF" + u32(3) + u64(0) + u64(1) + kv("k", T.ARRAY, u32(T.UINT64) + u64(2**63))
    assert len(data) == 49
    path = write(tmp_path, data)
    started = time.monotonic()
    refused(path, "array 'k' declares 9223372036854775808 elements")
    assert time.monotonic() - started < 1.0  # a hang guard: GGUFReader spins for minutes here


def test_huge_string_array_fails_fast(tmp_path):
    data = raw_gguf([kv("k", T.ARRAY, u32(T.STRING) + u64(2**62))])
    started = time.monotonic()
    refused(write(tmp_path, data), "array 'k' declares")
    assert time.monotonic() - started < 1.0


def test_string_length_past_end(tmp_path):
    refused(write(tmp_path, raw_gguf([kv("name", T.STRING, u64(1000) + b"abc")])), "string value of 'name'", "past the end")


def test_key_length_past_end(tmp_path):
    refused(write(tmp_path, raw_gguf([u64(2**40) + b"key" + b"\0" * 20])), "key of metadata entry 0", "past the end")


def test_string_in_array_past_end(tmp_path):
    strings = gstr("ok") + u64(500) + b"short"
    refused(write(tmp_path, raw_gguf([kv("toks", T.ARRAY, u32(T.STRING) + u64(2) + strings)])), "string 1 in 'toks'")


def test_tensor_count_too_large(tmp_path):
    refused(write(tmp_path, raw_gguf(n_tensors=2**60)), "declares 1152921504606846976 tensors")


def test_kv_count_too_large(tmp_path):
    refused(write(tmp_path, raw_gguf(n_kv=2**40)), "declares 1099511627776 metadata entries")


def test_unknown_value_type(tmp_path):
    refused(write(tmp_path, raw_gguf([kv("odd", 13, b"\0" * 8)])), "'odd' has unknown value type 13")


def test_unknown_array_element_type(tmp_path):
    refused(write(tmp_path, raw_gguf([kv("odd", T.ARRAY, u32(42) + u64(1) + b"\0" * 8)])), "unknown element type 42")


def test_array_nesting_is_bounded(tmp_path):
    payload = b"".join(u32(T.ARRAY) + u64(1) for _ in range(50)) + u32(T.UINT8) + u64(0)
    refused(write(tmp_path, raw_gguf([kv("deep", T.ARRAY, payload)])), "nested more than")


def test_duplicate_key(tmp_path):
    refused(write(tmp_path, raw_gguf([kv("a", T.UINT8, b"\1"), kv("a", T.UINT8, b"\2")])), "'a' appears twice")


def test_key_not_utf8(tmp_path):
    refused(write(tmp_path, raw_gguf([gstr(b"\xff\xfe") + u32(T.UINT8) + b"\1"])), "not valid UTF-8")


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        (kv("general.alignment", T.UINT32, u32(3)), "not a power of two"),
        (kv("general.alignment", T.UINT32, u32(0)), "not a power of two"),
        (kv("general.alignment", T.UINT64, u64(32)), "expected UINT32"),
    ],
)
def test_bad_alignment(tmp_path, entry, fragment):
    refused(write(tmp_path, raw_gguf([entry])), fragment)


def test_custom_alignment_is_used(tmp_path):
    data = raw_gguf(
        [kv("general.alignment", T.UINT32, u32(64))],
        [tensor_info("t", [8], F32, 0)],
        b"\0" * 32,
        alignment=64,
    )
    header = validate_gguf(write(tmp_path, data))
    assert header.alignment == 64 and header.data_offset == 128  # 90 header bytes, padded


def test_too_many_dimensions(tmp_path):
    info = tensor_info("t", [1, 1, 1, 1, 8], F32, 0)
    refused(write(tmp_path, raw_gguf(tensors=[info], data=b"\0" * 32)), "'t' has 5 dimensions; at most 4")


def test_unknown_tensor_type(tmp_path):
    info = tensor_info("t", [8], 999, 0)
    refused(write(tmp_path, raw_gguf(tensors=[info], data=b"\0" * 32)), "'t' has unknown ggml type 999")


def test_removed_tensor_type(tmp_path):
    info = tensor_info("t", [32], 4, 0)  # Q4_2, dropped from ggml long ago
    refused(write(tmp_path, raw_gguf(tensors=[info], data=b"\0" * 32)), "unknown ggml type 4")


def test_row_not_a_multiple_of_block(tmp_path):
    info = tensor_info("t", [16], Q4_0, 0)
    refused(write(tmp_path, raw_gguf(tensors=[info], data=b"\0" * 32)), "not a multiple of the Q4_0 block size 32")


def test_impossible_shape(tmp_path):
    info = tensor_info("t", [2**32, 2**32, 2**32], F32, 0)
    refused(write(tmp_path, raw_gguf(tensors=[info], data=b"\0" * 32)), "impossible shape")


def test_duplicate_tensor_name(tmp_path):
    infos = [tensor_info("t", [8], F32, 0), tensor_info("t", [8], F32, 32)]
    refused(write(tmp_path, raw_gguf(tensors=infos, data=b"\0" * 64)), "tensor name 't' appears twice")


def test_tensor_name_too_long(tmp_path):
    info = tensor_info("x" * 64, [8], F32, 0)
    refused(write(tmp_path, raw_gguf(tensors=[info], data=b"\0" * 32)), "longer than 63 bytes")


def test_tensor_offset_out_of_order(tmp_path):
    infos = [tensor_info("a", [8], F32, 32), tensor_info("b", [8], F32, 0)]
    refused(write(tmp_path, raw_gguf(tensors=infos, data=b"\0" * 64)), "'a' has data offset 32, expected 0")


def test_tensor_data_past_end(tmp_path):
    infos = [tensor_info("a", [8], F32, 0), tensor_info("b", [1024], F32, 32)]
    path = write(tmp_path, raw_gguf(tensors=infos, data=b"\0" * 64))
    refused(path, "data of tensor 'b' runs past the end of the file", "truncated")


def test_written_file_missing_its_last_bytes(tmp_path):
    path = write_vocab_gguf(tmp_path / "m.gguf", tensor=True)
    path.write_bytes(path.read_bytes()[:-4])
    refused(path, "data of tensor 'output_norm.weight' runs past the end")


# ---------------------------------------------------------------------------
# The real demo models (fixture from tests/conftest.py)


def test_demo_models_read_and_are_compatible(demo_models):
    started = time.monotonic()
    draft = read_metadata(demo_models.draft)
    assert time.monotonic() - started < 2.0
    assert draft.vocab_type == "gpt2"
    assert draft.n_vocab == 49152
    assert draft.add_bos is False
    assert draft.chat_template and "<|im_start|>" in draft.chat_template
    assert draft.file_type_name == "Q4_1"
    assert check_compatibility(draft, draft).ok

    target = read_metadata(demo_models.target)
    strict = read_metadata(demo_models.strict_draft)
    for a, b in [(target, draft), (target, strict), (draft, strict)]:
        result = check_compatibility(a, b)
        assert result.ok, result.reason


def test_a_passed_header_is_not_walked_again_until_the_file_changes(tmp_path, monkeypatch):
    """A load opens each model once (app.engine.gguf.model_file) and hands the ModelFile on;
    across loads an unchanged file that passed is not walked again, a changed or
    replaced one is, and a refused one every time."""
    import app.engine.gguf.header as header_module
    from app.engine.gguf.model_file import forget_opened_files, open_model_file

    walks = []
    walk = header_module._walk
    monkeypatch.setattr(header_module, "_walk",
                        lambda path, wanted, shown: walks.append(path.name) or walk(path, wanted, shown))
    forget_opened_files()
    path = write_vocab_gguf(tmp_path / "kept.gguf", name="first")
    for _ in range(3):
        assert open_model_file(path).metadata.name == "first"
    assert walks == ["kept.gguf"]

    replacement = write_vocab_gguf(tmp_path / "new.gguf", name="second, a longer name")
    os.replace(replacement, path)
    assert open_model_file(path).metadata.name == "second, a longer name" and walks[-1] == "kept.gguf"
    assert len(walks) == 2

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 60)
    for _ in range(2):
        with pytest.raises(ModelFileError):
            open_model_file(bad)
    assert walks.count("bad.gguf") == 2
