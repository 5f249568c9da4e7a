"""Where the content folders (skills, workflows, prompts) are read from unless settings say.

A checkout reads them at the repository's root, where they are edited. An installed package
(a wheel, the Docker image) has no repository root: the build puts copies of the folders in
``agents/bundled/`` (setup.py), and those are read instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

ContentFolder = Literal["skills", "workflows", "prompts"]

CHECKOUT = Path(__file__).resolve().parent.parent
BUNDLED = Path(__file__).resolve().parent / "bundled"


def installed() -> bool:
    """Whether this is an installed package carrying its own content, not a checkout."""
    # Only a build writes agents/bundled/; a checkout (editable installs too) never has it.
    return BUNDLED.is_dir()


def content_dir(name: ContentFolder) -> Path:
    """The shipped folder ``name``: the package's copy when installed, else the checkout's."""
    return (BUNDLED if installed() else CHECKOUT) / name
