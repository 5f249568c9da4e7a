"""Memory of a long thread: summaries of its earlier messages."""
