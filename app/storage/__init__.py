"""Where Tandem keeps things: paths, settings, chat history."""
