"""Skills: folders in ``skills/`` loaded in three tiers (index, definition, handler)."""
