"""Skilldesk's service shell: HTTP API, CLI, settings, logging."""
