"""Sinks: OUT's Delta Lake tables (delta.py), their maintenance (maintain.py), and the
row schemas of run_health and alerts (health.py)."""
