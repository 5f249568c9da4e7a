"""The web page's files as the service serves them (the page itself is tested in a browser,
tests/e2e): every file the page and its modules load is there, with a type a browser runs."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app


def test_the_page_and_every_file_it_loads_are_served_from_the_service(make_settings: Any) -> None:
    with TestClient(create_app(make_settings())) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "/" not in client.get("/openapi.json").json()["paths"]
        loaded = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
        modules = [p for p in loaded if p.endswith(".js")]
        assert "/static/js/main.js" in modules
        seen: set[str] = set()
        while modules:
            path = modules.pop()
            if path in seen:
                continue
            seen.add(path)
            script = client.get(path)
            assert script.status_code == 200, path
            assert "javascript" in script.headers["content-type"], path
            folder = path.rsplit("/", 1)[0]
            modules += [
                f"{folder}/{name}" for name in re.findall(r'from "\./([\w.]+)"', script.text)
            ]
        for path in [*loaded, "/static/vendor/mermaid.min.js"]:
            assert client.get(path).status_code == 200, path
        assert {"/static/js/api.js", "/static/js/chat.js", "/static/js/trace.js"} <= seen
        assert "http://" not in page.text
        assert "https://" not in page.text  # nothing from a CDN
