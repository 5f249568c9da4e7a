"""A skill folder's modules imported as a package of their own (``import_handler``), from
the code its last good version had (``KeptCode``), not from files edited since.

Standard library only: the worker processes import it (``agents/skills/worker.py``), as the
service's thread isolation does (``agents/skills/inprocess.py``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import os
import sys
import types
from typing import Any


def import_handler(
    package: str, path: str, module: str, code: dict[str, str] | None = None
) -> types.ModuleType:
    """Import ``module`` of the skill folder ``path`` as ``package.module``: each skill folder
    is a package of its own, so a handler may import its siblings relatively, and two skills'
    ``handler`` modules never collide (the service's thread isolation imports this way too).

    ``code``: the folder's Python files (relative path: source) as the skill's last good
    version had them (``Skill.code``); the package's modules are compiled from it, not read
    from the folder, whose files may have been edited since, broken (a broken edit keeps the
    last good version serving). Their ``__file__`` is still the folder's, for the data files
    beside them."""
    if package not in sys.modules:
        parent = types.ModuleType(package)
        parent.__path__ = [path]
        sys.modules[package] = parent
        if code:  # the code of the skill's earlier versions is let go (``packages.skill_package``)
            kin = package.rpartition("_")[0]
            for earlier in [k for k in _KEPT.code if k.rpartition("_")[0] == kin]:
                del _KEPT.code[earlier]
            _KEPT.code[package] = (path, code)
    full_name = f"{package}.{module}"
    spec = _KEPT.find_spec(full_name) if code else None
    if spec is None:
        file = os.path.join(path, *module.split(".")) + ".py"
        spec = importlib.util.spec_from_file_location(full_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {module!r} of {path}")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[full_name] = loaded
    try:
        spec.loader.exec_module(loaded)
    except BaseException:
        sys.modules.pop(full_name, None)
        raise
    return loaded


class KeptCode(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads the modules of skill packages from their kept code (``import_handler``),
    relative imports of a handler's siblings included; a module not in it is left to the
    usual finders (the folder)."""

    def __init__(self) -> None:
        self.code: dict[str, tuple[str, dict[str, str]]] = {}  # package: (folder, code)

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, rest = fullname.partition(".")
        kept = self.code.get(package)
        if kept is None or not rest:
            return None
        folder, code = kept
        relative = rest.replace(".", "/")
        for name, is_package in ((f"{relative}.py", False), (f"{relative}/__init__.py", True)):
            if name in code:
                origin = os.path.join(folder, *name.split("/"))
                spec = importlib.util.spec_from_loader(
                    fullname, self, origin=origin, is_package=is_package
                )
                if spec is not None and is_package:
                    spec.submodule_search_locations = [os.path.dirname(origin)]
                return spec
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        spec = module.__spec__
        assert spec is not None
        assert spec.origin is not None
        package = spec.name.partition(".")[0]
        folder, code = self.code[package]
        relative = os.path.relpath(spec.origin, folder).replace(os.sep, "/")
        module.__file__ = spec.origin
        source = code[relative]
        # Tracebacks and ``inspect`` read this source, not the file edited since.
        linecache.cache[spec.origin] = (len(source), None, source.splitlines(True), spec.origin)
        exec(compile(source, spec.origin, "exec"), module.__dict__)


_KEPT = KeptCode()
sys.meta_path.insert(0, _KEPT)
