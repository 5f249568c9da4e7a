"""The package layout, which pyproject.toml (the project's metadata) cannot express.

The content folders at the repository's root (skills/, workflows/, prompts/) go into the wheel
as ``agents/bundled/<folder>``, so an installed Skilldesk (the Docker image, ``pip install``)
serves them wherever it runs; agents/content.py finds them. A checkout reads them in place.
"""

from __future__ import annotations

import os

from setuptools import find_namespace_packages, setup

CONTENT = ("skills", "workflows", "prompts")


def content_packages() -> dict[str, str]:
    """Each content folder and subfolder as a package of data files: name -> source folder."""
    packages: dict[str, str] = {}
    for name in CONTENT:
        for folder, subfolders, _ in os.walk(name):
            subfolders[:] = sorted(
                s for s in subfolders if s != "__pycache__" and not s.startswith(".")
            )
            if "." in os.path.basename(folder):
                # A package name's dots are folders: the files would land elsewhere.
                raise SystemExit(
                    f"setup.py: rename {folder}: a dot in a folder name is not shipped"
                )
            packages["agents.bundled." + folder.replace(os.sep, ".")] = folder
    return packages


CONTENT_PACKAGES = content_packages()

setup(
    packages=[*find_namespace_packages(include=["app*", "agents*"]), *CONTENT_PACKAGES],
    package_dir=CONTENT_PACKAGES,
    package_data={
        "app.web": ["static/*.*", "static/js/*", "static/vendor/*"],
        "agents.skills": ["skill.schema.json"],
        "agents.workflows": ["workflow.schema.json"],
        **{package: ["*"] for package in CONTENT_PACKAGES},
    },
)
