"""Files the UI loads at run time (icon, token palette, style sheet).

A package, so that ``importlib.resources.files("app.resources")`` finds the
files in a source checkout, an installed wheel and a PyInstaller bundle alike.
"""
