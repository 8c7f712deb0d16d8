"""Examples shipped inside the package (the demo runs them with nothing else installed)."""
