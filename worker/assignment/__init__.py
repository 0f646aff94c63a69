"""Who runs which task: the wire model and the pure planner."""
