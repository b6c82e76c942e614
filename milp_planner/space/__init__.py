"""The plan space: tensor geometry (rows, halos, channels), the cut families, the plan type."""
