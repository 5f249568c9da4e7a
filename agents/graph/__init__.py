"""The conversation graph and its state."""
