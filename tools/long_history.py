"""What a chat of many short messages costs against a running ``tandem serve``: the
request's wall time, and of it the prompt's evaluation (llama-server's ``timings``);
the rest is reading, checking and trimming the history to the context, and the reply.

    tandem serve --port 8080 &
    python tools/long_history.py [--url http://127.0.0.1:8080] [--messages 50000]
    python tools/long_history.py --parts [--messages 50000]   # in this process, the demo pair

``--parts`` times the pieces one after another in one process: trimming the history
(``conversation_prompt``), the target's evaluation of the trimmed prompt, and the draft
model's, whole and of the last ``TAIL_LEAST`` tokens (the least of a long new prompt it reads).

Prints the figures; nothing is asserted (speed depends on the machine and its load).
"""

from __future__ import annotations

import argparse
import json
import time

import httpx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--parts", action="store_true", help="time the parts in this process instead")
    args = parser.parse_args()
    if args.parts:
        parts(args.messages)
        return
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
                for i in range(args.messages)]
    body = json.dumps({"messages": messages, "max_tokens": 4, "temperature": 0}).encode()
    started = time.perf_counter()
    reply = httpx.post(args.url + "/v1/chat/completions", content=body, timeout=3600,
                       headers={"Content-Type": "application/json"}).json()
    wall = time.perf_counter() - started
    timings, tandem = reply["timings"], reply["tandem"]
    print(f"{args.messages} messages ({len(body):,} bytes): answered in {wall:.2f} s")
    print(f"  prompt: {reply['usage']['prompt_tokens']} tokens, {tandem['left_out_messages']} messages left out, "
          f"evaluated in {timings['prompt_ms'] / 1000:.2f} s (the target; the draft reads at most its tail)")
    print(f"  reply: {timings['predicted_n']} tokens in {timings['predicted_ms'] / 1000:.2f} s")
    print(f"  the rest (reading, checking, trimming, the draft): {wall - (timings['prompt_ms'] + timings['predicted_ms']) / 1000:.2f} s")


def parts(count: int) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from app.backends.llama.backend import LlamaBackend
    from app.engine.prompting.chat import conversation_prompt
    from app.engine.speculation.drafters import TAIL_LEAST
    from app.models.demo import demo_pair

    pair = demo_pair()
    target, draft = LlamaBackend(pair.target, n_ctx=4096), LlamaBackend(pair.draft, n_ctx=4096)
    history = [("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(count)]
    started = time.perf_counter()
    prompt = conversation_prompt(target, history, "", 4).tokens
    print(f"{count} messages trimmed to {len(prompt)} tokens in {time.perf_counter() - started:.2f} s")
    body = prompt[:-1]

    def evaluate(model, tokens) -> float:
        model.trim(0)
        started = time.perf_counter()
        model.evaluate(tokens, [])
        return time.perf_counter() - started

    for _ in range(2):
        print(f"  target, {len(body)} tokens: {evaluate(target, body):.2f} s; draft, the same: "
              f"{evaluate(draft, body):.2f} s; draft, the last {TAIL_LEAST}: {evaluate(draft, body[-TAIL_LEAST:]):.2f} s")
    target.close()
    draft.close()


if __name__ == "__main__":
    main()
