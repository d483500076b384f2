"""Speculative decoding: the loop (``speculative``), the drafters that guess, the
policies that choose how much to guess, and the sampling and acceptance rules that keep
the target's output exact. Uses ``app.engine.gguf`` only to read what a file says about
itself; never the prompting side."""
