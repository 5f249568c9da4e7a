"""``python -m app.cli``: the ``skilldesk`` command without the installed script."""

from app.cli import cli

cli(prog_name="skilldesk")
