"""Tasks: their lifecycle, their stores, and applying an assignment to them."""
