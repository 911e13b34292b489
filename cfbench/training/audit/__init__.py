"""The co-cheating audit: judge, per-step rates, report, and replay of a bank of questions."""
