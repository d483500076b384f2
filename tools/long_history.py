"""What a chat of many short messages costs against a running ``tandem serve``: the
request's wall time, and of it the prompt's evaluation (llama-server's ``timings``);
the rest is reading, checking and trimming the history to the context, and the reply.

    tandem serve --port 8080 &
    python tools/long_history.py [--url http://127.0.0.1:8080] [--messages 50000]

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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
