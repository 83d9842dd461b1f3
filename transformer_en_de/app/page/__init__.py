"""The page's layout, a module per tab with its wiring beside its buttons (app.py assembles them)."""
