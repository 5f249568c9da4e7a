"""Thread state: its schema, its checkpointers (and, next, migrations and thread records)."""
