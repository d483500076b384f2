"""Widgets only: they display state and emit signals; no model code runs here."""
