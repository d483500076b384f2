"""The command line: `tandem`'s parser (main.py), its commands, and the launch of the window (gui.py)."""
