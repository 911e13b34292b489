"""Typed training configs (schema.py: the machinery; sections.py: nested sections; classes.py: one class per treatment)."""
