"""An edit or a Regenerate is asked with the branch now shown: the real models keep the
KV cache of the prefix it shares with the last prompt and evaluate only the new suffix."""

from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig


def run(engine, target, history, max_tokens=8):
    prompt = chat_tokens(target, build_messages(history))
    generation = engine.generate(prompt, SamplingConfig(), SpecConfig(draft_max=4), max_tokens)
    generation.run()
    return prompt, generation.stats


def test_edit_and_regenerate_evaluate_only_what_changed(f32_target, q41_draft):
    f32_target.trim(0)  # the session-wide models may hold another test's prompt
    q41_draft.trim(0)
    engine = SpeculativeEngine(f32_target, ModelDrafter(q41_draft, f32_target.n_vocab))
    chat = [("user", "Name a colour."), ("assistant", "Blue."), ("user", "Now name a fruit, please.")]
    first_prompt, first = run(engine, f32_target, chat)
    assert first.prompt_eval_tokens == len(first_prompt)

    # Regenerate: the very same prompt; only its last token is evaluated again.
    again_prompt, again = run(engine, f32_target, chat)
    assert again_prompt == first_prompt and again.prompt_eval_tokens == 1

    # Edit the last user message: the shared prefix stays, the edited suffix is evaluated.
    edited = chat[:2] + [("user", "Now name a vegetable.")]
    edited_prompt, after_edit = run(engine, f32_target, edited)
    shared = next(i for i, (a, b) in enumerate(zip(first_prompt, edited_prompt)) if a != b)
    assert after_edit.prompt_eval_tokens == len(edited_prompt) - shared
    assert after_edit.prompt_eval_tokens < len(edited_prompt) // 2
