"""Names of files and repositories on the Hub, as the terminal spells them."""

import pytest

from app.hub.files import HubFile, HubNameError, parse_file, parse_repo, parts_of, quant_of


@pytest.mark.parametrize("name, quant", [
    ("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
    ("qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0"),
    ("SmolLM2-135M-Instruct.F32.gguf", "F32"),
    ("gemma-3-270m-it-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
    ("Llama-3.2-1B-Instruct-IQ4_XS.gguf", "IQ4_XS"),
    ("model-bf16.gguf", "BF16"),
    ("Q4_K_M/Big-Model-Q4_K_M-00001-of-00003.gguf", "Q4_K_M"),
    ("model.gguf", ""),
])
def test_the_quantisation_is_read_from_the_name(name, quant):
    assert quant_of(name) == quant


def test_hub_files_parse_with_a_revision_either_place():
    assert parse_file("hf://org/repo/sub/m-Q4_0.gguf") == HubFile("org/repo", "sub/m-Q4_0.gguf")
    assert parse_file("hf://org/repo@v1/m.gguf") == HubFile("org/repo", "m.gguf", "v1")
    assert parse_file("hf://org/repo/m.gguf@abc") == HubFile("org/repo", "m.gguf", "abc")
    assert str(HubFile("org/repo", "m.gguf", "v1")) == "hf://org/repo@v1/m.gguf"


@pytest.mark.parametrize("text", ["org/repo/m.gguf", "hf://org/m.gguf", "hf://org/repo/../../etc/passwd.gguf",
                                  "hf://org/repo/m.bin", "hf://-org/repo/m.gguf", "hf://org/repo//m.gguf"])
def test_a_bad_hub_file_name_is_one_line(text):
    with pytest.raises(HubNameError) as err:
        parse_file(text)
    assert "\n" not in str(err.value)


def test_repositories_parse_with_a_quantisation():
    repo = parse_repo("bartowski/Qwen2.5-7B-Instruct-GGUF:q4_k_m")
    assert (repo.repo, repo.quant) == ("bartowski/Qwen2.5-7B-Instruct-GGUF", "Q4_K_M")
    assert parse_repo("org/repo").quant == ""
    for bad in ("org", "org/repo/extra", "org/repo:Q4;rm"):
        with pytest.raises(HubNameError):
            parse_repo(bad)


def test_a_split_model_names_every_part():
    assert parts_of("d/m-Q4_K_M-00001-of-00003.gguf") == [
        "d/m-Q4_K_M-00001-of-00003.gguf", "d/m-Q4_K_M-00002-of-00003.gguf", "d/m-Q4_K_M-00003-of-00003.gguf"]
    assert parts_of("m.gguf") == ["m.gguf"]
