"""From a chat to the target's tokens: the model's chat template or a named format
(``chat``, ``chat_formats``), limits on a hostile template (``template_limits``), and the
tool-call formats models write (``tool_prompt``, ``tool_calls``). Knows nothing of
decoding or of GGUF files."""
