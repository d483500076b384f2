"""Small GGUF files of each chat family, with no chat template: the family's
architecture, name and special tokens (control tokens, BOS/EOS as its files set them).

``write_family(path, family)`` writes a vocabulary-only file (llama.cpp reads its
tokenizer with ``vocab_only``; no weights); ``write_gemma3(path)`` a complete tiny
Gemma 3 (random weights) that llama.cpp loads and runs, as the issue's Gemma 3 270M.

The vocabulary is byte-level BPE (GPT-2's 256 byte characters, one merge), so every
text tokenizes to bytes and back to itself exactly, and the family's markers are whole
control tokens: what a prompt's tokens read back is exactly what was rendered.

``FAMILIES`` holds, per family, the conversation and its documented prompt: the format
its model card or its official chat template gives (the source is named), which is
also what llama.cpp's built-in format of that name writes. The BOS the vocabulary asks
for comes first; the prompt ends with the assistant's turn opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

TT = gguf.TokenType
SYSTEM, HI, HELLO, BYE = "Be brief.", "Hi", "Hello!", "Bye"
WITH_SYSTEM = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": HI}]
TWO_TURNS = [{"role": "user", "content": HI}, {"role": "assistant", "content": HELLO},
             {"role": "user", "content": BYE}]


def byte_level_tokens() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


@dataclass(frozen=True)
class Family:
    format: str                      # the llama.cpp format it must get
    arch: str
    name: str
    specials: tuple[str, ...]        # control tokens, in id order after the bytes
    bos: str | None = None
    eos: str | None = None
    add_bos: bool = False
    pre: str | None = None
    messages: list = field(default_factory=lambda: WITH_SYSTEM)
    prompt: str = ""                 # the documented prompt, BOS included
    turn_end: str | None = None      # the token that ends the model's turn: must stop generation
    source: str = ""
    tokenized: str | None = None     # what the prompt's tokens read back, when llama.cpp strips some

    @property
    def tokens_read_back(self) -> str:
        return self.prompt if self.tokenized is None else self.tokenized


FAMILIES: dict[str, Family] = {f.format if key is None else key: f for key, f in [
    (None, Family(
        "gemma", "gemma3", "gemma-3-270m-it", ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"),
        "<bos>", "<eos>", True, messages=WITH_SYSTEM + TWO_TURNS[1:],
        prompt="<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
               "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n",
        turn_end="<end_of_turn>", source="Gemma 3 model card / google/gemma-3-270m-it chat_template")),
    (None, Family(
        "llama3", "llama", "Meta-Llama-3-8B-Instruct",
        ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        "<|begin_of_text|>", "<|end_of_text|>", True,
        prompt="<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        turn_end="<|eot_id|>", source="Meta Llama 3 model card, 'Prompt format'")),
    (None, Family(
        "llama4", "llama4", "Llama-4-Scout-17B-16E-Instruct",
        ("<|begin_of_text|>", "<|header_start|>", "<|header_end|>", "<|eot|>"), "<|begin_of_text|>", "<|eot|>", True,
        prompt="<|begin_of_text|><|header_start|>system<|header_end|>\n\nBe brief.<|eot|>"
               "<|header_start|>user<|header_end|>\n\nHi<|eot|><|header_start|>assistant<|header_end|>\n\n",
        turn_end="<|eot|>", source="Llama 4 model card, 'Prompt format'")),
    ("llama2", Family(
        "llama2-sys-bos", "llama", "Llama-2-7b-chat-hf", ("<unk>", "<s>", "</s>"), "<s>", "</s>", True,
        prompt="<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]",
        turn_end="</s>", source="Hugging Face blog 'Llama 2 is here', 'How to prompt Llama 2'")),
    ("llama2 two turns", Family(
        "llama2-sys-bos", "llama", "Llama-2-7b-chat-hf", ("<unk>", "<s>", "</s>"), "<s>", "</s>", True,
        messages=TWO_TURNS,
        # llama.cpp's llama2 formats leave out the spaces Meta puts around an answer
        # ("[/INST] Hello! </s>"): the model's answer tokens carry their own.
        prompt="<s>[INST] Hi [/INST]Hello!</s><s>[INST] Bye [/INST]",
        turn_end="</s>", source="llama.cpp's 'llama2-sys-bos' (tests/test-chat-template.cpp)")),
    (None, Family(
        "mistral-v1", "llama", "Mistral-7B-Instruct-v0.1", ("<unk>", "<s>", "</s>"), "<s>", "</s>", True,
        messages=TWO_TURNS, prompt="<s> [INST] Hi [/INST] Hello!</s> [INST] Bye [/INST]",
        turn_end="</s>", source="mistralai/cookbook, concept-deep-dive/tokenization/chat_templates.md, v1")),
    (None, Family(
        "mistral-v3", "llama", "Mistral-7B-Instruct-v0.3", ("<unk>", "<s>", "</s>", "[INST]", "[/INST]"),
        "<s>", "</s>", True, messages=TWO_TURNS, prompt="<s>[INST] Hi[/INST] Hello!</s>[INST] Bye[/INST]",
        turn_end="</s>", source="mistralai/cookbook, chat_templates.md, v3")),
    (None, Family(
        "mistral-v7", "llama", "Mistral-Large-Instruct-2411",
        ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"), "<s>", "</s>", True,
        prompt="<s>[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST]",
        turn_end="</s>", source="mistralai/Mistral-Large-Instruct-2411 model card, 'Basic Instruct Template (V7)'")),
    (None, Family(
        "mistral-v7-tekken", "llama", "Mistral-Small-3.1-24B-Instruct-2503",
        ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"), "<s>", "</s>", True,
        pre="tekken", prompt="<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST]",
        turn_end="</s>", source="mistralai/Mistral-Small-3.1-24B-Instruct-2503 model card, V7-Tekken")),
    (None, Family(
        "phi3", "phi3", "Phi-3-mini-4k-instruct",
        ("<unk>", "<s>", "</s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), "<s>",
        "<|endoftext|>", False,  # llama.cpp looks up '</s>' in a file named Phi-3
        prompt="<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n",
        turn_end="<|end|>", source="microsoft/Phi-3-mini-4k-instruct model card, 'Chat Format'",
        # Phi-3's markers strip the whitespace after them (rstrip, in its tokenizer as in llama.cpp's).
        tokenized="<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>")),
    (None, Family(
        "phi4", "phi3", "phi-4", ("<|endoftext|>", "<|im_start|>", "<|im_sep|>", "<|im_end|>"), None, "<|im_end|>",
        prompt="<|im_start|>system<|im_sep|>Be brief.<|im_end|><|im_start|>user<|im_sep|>Hi<|im_end|>"
               "<|im_start|>assistant<|im_sep|>",
        turn_end="<|im_end|>", source="microsoft/phi-4 model card, 'Input Formats'")),
    (None, Family(
        "chatml", "qwen2", "Qwen2.5-0.5B-Instruct", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        None, "<|im_end|>", prompt="<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                                   "<|im_start|>assistant\n",
        turn_end="<|im_end|>", source="ChatML (openai/openai-python chatml.md); Qwen2.5 chat_template")),
    ("chatml fallback", Family(
        "chatml", "llama", "tiny-base", ("<unk>", "<s>", "</s>"), "<s>", "</s>", False,
        prompt="<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        source="nothing fits: ChatML")),
    (None, Family(
        "deepseek3", "deepseek2", "DeepSeek-V3",
        ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"),
        "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", True, messages=TWO_TURNS,
        prompt="<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜>",
        turn_end="<｜end▁of▁sentence｜>", source="deepseek-ai/DeepSeek-V3 chat_template")),
    (None, Family(
        "deepseek2", "deepseek2", "DeepSeek-V2-Lite-Chat", ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
        "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", True, messages=TWO_TURNS,
        prompt="<｜begin▁of▁sentence｜>User: Hi\n\nAssistant: Hello!<｜end▁of▁sentence｜>User: Bye\n\nAssistant:",
        turn_end="<｜end▁of▁sentence｜>", source="deepseek-ai/DeepSeek-V2-Chat model card, 'Chat Completion'")),
    (None, Family(
        "deepseek", "llama", "deepseek-coder-6.7b-instruct",
        ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<|EOT|>"), "<｜begin▁of▁sentence｜>", "<|EOT|>", True,
        messages=TWO_TURNS,
        prompt="<｜begin▁of▁sentence｜>### Instruction:\nHi\n### Response:\nHello!\n<|EOT|>\n### Instruction:\nBye\n"
               "### Response:\n",
        turn_end="<|EOT|>", source="deepseek-ai/deepseek-coder-6.7b-instruct chat_template")),
    (None, Family(
        "command-r", "command-r", "c4ai-command-r-v01",
        ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
         "<|SYSTEM_TOKEN|>"), "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", True,
        prompt="<BOS_TOKEN><|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be brief.<|END_OF_TURN_TOKEN|>"
               "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
        turn_end="<|END_OF_TURN_TOKEN|>", source="CohereForAI/c4ai-command-r-v01 model card / chat_template")),
    (None, Family(
        "granite", "granite", "granite-3.1-2b-instruct",
        ("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>"), "<|end_of_text|>", "<|end_of_text|>", False,
        prompt="<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
               "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>",
        turn_end="<|end_of_text|>", source="ibm-granite/granite-3.1-2b-instruct chat_template")),
    (None, Family(
        "zephyr", "stablelm", "stablelm-zephyr-3b", ("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>"),
        "<|endoftext|>", "<|endoftext|>", False,
        prompt="<|system|>\nBe brief.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n<|assistant|>\n",
        turn_end="<|endoftext|>", source="stabilityai/stablelm-zephyr-3b model card, 'Usage'")),
    (None, Family(
        "vicuna", "llama", "vicuna-13b-v1.1", ("<unk>", "<s>", "</s>"), "<s>", "</s>", True,
        prompt="<s>Be brief.\n\nUSER: Hi\nASSISTANT:",
        turn_end="</s>", source="eachadea/vicuna-13b-1.1 chat_template (llama.cpp's 'vicuna')")),
    (None, Family(
        "falcon3", "llama", "Falcon3-7B-Instruct", ("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>"),
        None, "<|endoftext|>", False,
        prompt="<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n",
        turn_end="<|endoftext|>", source="tiiuae/Falcon3-7B-Instruct chat_template")),
    (None, Family(
        "chatglm3", "chatglm", "chatglm3-6b", ("[gMASK]", "sop", "<|system|>", "<|user|>", "<|assistant|>"),
        None, None, False, prompt="[gMASK]sop<|system|>\n Be brief.<|user|>\n Hi<|assistant|>",
        source="THUDM/chatglm3-6b PROMPT.md")),
    (None, Family(
        "chatglm4", "chatglm", "glm-4-9b-chat",
        ("<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>"), None, "<|endoftext|>",
        False, prompt="[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n",
        source="THUDM/glm-4-9b-chat chat_template (llama.cpp's 'chatglm4')")),
    (None, Family(
        "minicpm", "minicpm", "MiniCPM-2B-sft", ("<unk>", "<s>", "</s>", "<用户>", "<AI>"), "<s>", "</s>", True,
        messages=TWO_TURNS, prompt="<s><用户>Hi<AI>Hello!<用户>Bye<AI>",
        turn_end="</s>", source="openbmb/MiniCPM-2B-sft-bf16 model card ('<用户>{prompt}<AI>')")),
    (None, Family(
        "exaone3", "exaone", "EXAONE-3.0-7.8B-Instruct",
        ("[BOS]", "[|endofturn|]", "[|system|]", "[|user|]", "[|assistant|]"), "[BOS]", "[|endofturn|]", False,
        prompt="[|system|]Be brief.[|endofturn|]\n[|user|]Hi\n[|assistant|]",
        turn_end="[|endofturn|]", source="LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct chat_template")),
    (None, Family(
        "rwkv-world", "rwkv6", "RWKV-6-World-1.6B", ("<s>",), None, None, False,
        prompt="System: Be brief.\n\nUser: Hi\n\nAssistant:", source="BlinkDL RWKV World prompt format")),
    (None, Family(
        "openchat", "llama", "openchat-3.5-0106", ("<unk>", "<s>", "</s>", "<|end_of_turn|>"), "<s>",
        "<|end_of_turn|>", True, messages=[{"role": "user", "content": HI}],
        prompt="<s>GPT4 Correct User: Hi<|end_of_turn|>GPT4 Correct Assistant:",
        turn_end="<|end_of_turn|>", source="openchat/openchat-3.5-0106 model card")),
]}


def write_family(path: Path, family: Family, *, chat_template: str | None = None) -> Path:
    """A vocabulary-only GGUF of ``family`` (no tensors; no chat template unless given)."""
    tokens = byte_level_tokens() + ["Ġt"] + list(family.specials)
    types = [TT.NORMAL] * 257 + [TT.CONTROL] * len(family.specials)
    w = gguf.GGUFWriter(path, family.arch)
    w.add_name(family.name)
    _add_vocab(w, tokens, types, family)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _add_vocab(w: gguf.GGUFWriter, tokens: list[str], types: list[int], family: Family) -> None:
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(family.pre or "default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["Ġ t"])
    if family.bos is not None:
        w.add_bos_token_id(tokens.index(family.bos))
    if family.eos is not None:
        w.add_eos_token_id(tokens.index(family.eos))
    w.add_add_bos_token(family.add_bos)
    w.add_add_eos_token(False)


N_EMBD, N_FF, N_LAYER, N_HEAD, HEAD_DIM = 64, 128, 2, 2, 32


def write_gemma3(path: Path, *, name: str = "gemma-3-270m-it") -> Path:
    """A complete tiny Gemma 3 (seeded random F32 weights) without a chat template."""
    family = FAMILIES["gemma"]
    rng = np.random.default_rng(3)
    tokens = byte_level_tokens() + ["Ġt"] + list(family.specials)
    tokens += [f"<unused{i}>" for i in range(-len(tokens) % 32)]
    types = [TT.NORMAL] * 257 + [TT.CONTROL] * (len(tokens) - 257)
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_name(name)
    w.add_context_length(1024)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(1)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(512)
    w.add_rope_freq_base(1_000_000.0)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_vocab(w, tokens, types, family)

    def tensor(name: str, *shape: int, scale: float = 0.05) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def norm(name: str, size: int = N_EMBD) -> None:
        w.add_tensor(name, np.zeros(size, dtype=np.float32))  # Gemma's norms scale by 1 + weight

    tensor("token_embd.weight", len(tokens), N_EMBD)
    for i in range(N_LAYER):
        norm(f"blk.{i}.attn_norm.weight")
        tensor(f"blk.{i}.attn_q.weight", N_HEAD * HEAD_DIM, N_EMBD)
        tensor(f"blk.{i}.attn_k.weight", HEAD_DIM, N_EMBD)
        tensor(f"blk.{i}.attn_v.weight", HEAD_DIM, N_EMBD)
        norm(f"blk.{i}.attn_q_norm.weight", HEAD_DIM)
        norm(f"blk.{i}.attn_k_norm.weight", HEAD_DIM)
        tensor(f"blk.{i}.attn_output.weight", N_EMBD, N_HEAD * HEAD_DIM)
        norm(f"blk.{i}.post_attention_norm.weight")
        norm(f"blk.{i}.ffn_norm.weight")
        tensor(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
        norm(f"blk.{i}.post_ffw_norm.weight")
    norm("output_norm.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
