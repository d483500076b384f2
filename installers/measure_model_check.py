"""What the trial load in a child costs a model load: new file, then remembered.

    python installers/measure_model_check.py [MODEL.gguf ...]   (default: the demo pair)

For each file: the trial (``check_model``) against an empty cache, then again from
the cache, then ``load_pair`` of it in this process for scale. The build probe's pass
is warmed first (it is remembered separately, and is not the model's cost). Runs in
a scratch TANDEM_HOME: the user's caches are left alone.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    os.environ["TANDEM_HOME"] = tempfile.mkdtemp(prefix="tandem-measure-")
    from app.backends.build_check import check_llama_build
    from app.backends.loader import load_pair
    from app.backends.model_check import check_model
    from app.models.demo import demo_pair

    files = [Path(a) for a in argv] or [demo_pair().target, demo_pair().draft]
    check_llama_build()  # warm: remembered by the build, not by the model
    print(f"{'file':40} {'MB':>7} {'trial, new':>11} {'remembered':>11} {'load_pair':>10}")
    for path in files:
        cache = Path(tempfile.mkdtemp(prefix="tandem-trial-cache-"))
        started = time.perf_counter()
        new = check_model(path, cache_dir=cache)
        new_s = time.perf_counter() - started
        assert new.ok and not new.cached, new.message
        cached = []
        for _ in range(5):
            started = time.perf_counter()
            assert check_model(path, cache_dir=cache).cached
            cached.append(time.perf_counter() - started)
        started = time.perf_counter()
        load_pair(path, drafter="none", n_ctx=512).close()  # remembered by now: the load alone
        load_s = time.perf_counter() - started
        print(f"{path.name[:40]:40} {path.stat().st_size / 1e6:7.1f} {new_s:10.2f}s "
              f"{statistics.median(cached) * 1000:9.1f}ms {load_s:9.2f}s")
    print("(remembered: a stat, the llama.cpp build's fingerprint and the cache read; the loader validates anyway)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
