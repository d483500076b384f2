"""Stats as words: the one place that decides how figures read in the window."""

from __future__ import annotations

from app.engine.prompting.chat import left_out_text
from app.engine.types import SPECULATION_OFF, Stats, StopReason

STOP_REASONS = {
    StopReason.EOS: "finished",
    StopReason.MAX_TOKENS: "reached the reply length limit",
    StopReason.CANCELLED: "stopped",
    StopReason.CONTEXT_FULL: "context full",
}


def rate(value: float) -> str:
    return f"{value:.1f} tok/s"


def percent(value: float) -> str:
    return f"{value * 100:.0f}%"


def prompt_reused(stats: Stats) -> int:
    """Prompt tokens taken from the KV cache instead of evaluated again (0 when none)."""
    if stats.prompt_tokens and 0 < stats.prompt_eval_tokens < stats.prompt_tokens:
        return stats.prompt_tokens - stats.prompt_eval_tokens
    return 0


def seconds(value: float) -> str:
    return f"{value:.1f} s" if abs(value) < 60 else f"{int(value // 60)} min {abs(value) % 60:.0f} s"


def layer_places(layers) -> str:
    """ "20 on 127.0.0.1:50052, 10 on 127.0.0.1:50053, 0 here" from ``LoadInfo.layers``."""
    return ", ".join(f"{count} here" if where == "here" else f"{count} on {where}" for where, count in layers)


def target_round(stats: Stats, network_seconds: float = 0.0) -> str:
    """The target's time per round (its verify batch), network included, and the network's
    share of it. ggml's RPC client keeps no account of its time on the wire, so the share
    is estimated: a target pass makes one round trip per worker, each as long as the
    hello's measured before the load (``network_seconds`` is their sum)."""
    if not stats.rounds:
        return "—"
    per_round = stats.target_seconds / stats.rounds
    if network_seconds <= 0 or per_round <= 0:
        return f"{per_round * 1000:.0f} ms (network share not measured)"
    share = min(1.0, network_seconds / per_round)
    return f"{per_round * 1000:.0f} ms, network ≈ {network_seconds * 1000:.1f} ms ({share:.0%})"


def time_saved(stats: Stats) -> str | None:
    """What speculation saved against the target alone, e.g. "2.1 s saved · 1.4×" (None: unknown)."""
    saved, speedup = stats.seconds_saved, stats.speedup
    if saved is None or speedup is None:
        return None
    if saved >= 0:
        return f"{seconds(saved)} saved · {speedup:.1f}×"
    return f"{seconds(-saved)} lost · {speedup:.2f}×"


# Past this share of the context (the reply's room included), the next messages may no
# longer fit beside the whole conversation: the window says so before it happens.
CONTEXT_WARN_SHARE = 0.8


def context_in_view(used: int, n_ctx: int, n_ctx_train: int = 0) -> str:
    """E.g. "412 of 2,048 tokens (20%) · trained on 8,192"."""
    text = f"{used:,} of {n_ctx:,} tokens ({used / n_ctx:.0%})" if n_ctx else f"{used:,} tokens"
    if n_ctx_train:
        text += f" · trained on {n_ctx_train:,}"
    return text


def context_warning(used: int, reply_room: int, n_ctx: int) -> str | None:
    """The notice before the chat starts leaving its earliest exchanges out (None: room enough)."""
    if not n_ctx or used + reply_room < CONTEXT_WARN_SHARE * n_ctx:
        return None
    return (f"This chat uses {used:,} of the model's {n_ctx:,}-token context. Soon the earliest "
            "exchanges will be left out of what the model sees to make room; start a new chat "
            "or raise the context size in Settings to keep everything in view.")


def message_summary(stats: Stats) -> str:
    """One line kept under a reply: speed, and what speculation did for it."""
    parts = [f"{stats.tokens} tokens", rate(stats.tokens_per_second)]
    if stats.speculative:
        parts += [f"acceptance {percent(stats.acceptance)}",
                  f"{stats.tokens_per_round:.2f} tokens/round",
                  f"{stats.accepted}/{stats.drafted} drafts accepted"]
        saved = time_saved(stats)
        if saved:
            parts.append(saved)
    else:
        parts.append("no speculation" + (f" ({stats.note})" if stats.note and stats.note != SPECULATION_OFF else ""))
    reason = STOP_REASONS.get(stats.stop_reason)
    if reason and stats.stop_reason != StopReason.EOS:
        parts.append(reason)
    reused = prompt_reused(stats)
    if reused:
        # An edit or a Regenerate keeps the chat's evaluated prefix: only the new suffix ran.
        parts.append(f"prompt: {stats.prompt_eval_tokens} new, {reused} reused")
    if stats.left_out:
        parts.append(left_out_text(stats.left_out))
    if stats.prompt_notice:
        parts.append("plain ChatML prompt (the model's template failed)")
    return " · ".join(parts)
