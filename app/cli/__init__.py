"""The ``skilldesk`` command line: the root command, with one module per command or group.

A new group is a module here with its own ``cli = Typer(...)`` (``app.cli.common.Typer``, so
that its help flows), registered below with ``cli.add_typer``; what several groups need
(settings, the store's options) lives in ``app.cli.common``.
"""

from __future__ import annotations

from app.cli import approvals, chat, keys, serve, skills, threads, workflows
from app.cli.common import Typer

cli = Typer(
    help="Skilldesk: a multi-agent chatbot service with skill plugins.",
    no_args_is_help=True,
    add_completion=False,
)

cli.command("serve")(serve.serve)
cli.command("chat")(chat.chat)
cli.add_typer(skills.cli, name="skills")
cli.add_typer(workflows.cli, name="workflows")
cli.add_typer(threads.cli, name="threads")
cli.add_typer(approvals.cli, name="approvals")
cli.add_typer(keys.cli, name="keys")


def main() -> None:
    """Console-script entry point."""
    cli()
