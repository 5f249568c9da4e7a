"""The web page's files as the service serves them (the page itself is tested in a browser,
tests/e2e): every file the page and its modules load is there, with a type a browser runs,
revalidated with a 304 and gzipped where large; and /docs, the API's page, the same way."""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app
from app.web import STATIC

VENDOR = STATIC / "vendor"


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


def test_the_page_answers_a_matching_if_none_match_with_304_and_keeps_its_headers(
    make_settings: Any,
) -> None:
    with TestClient(create_app(make_settings())) as client:
        page = client.get("/")
        assert page.headers["cache-control"] == "no-cache"
        etag = page.headers["etag"]
        again = client.get("/", headers={"If-None-Match": f'"other", {etag}'})
        assert again.status_code == 304
        assert again.content == b""
        assert again.headers["etag"] == etag
        assert again.headers["cache-control"] == "no-cache"
        assert again.headers["content-security-policy"] == page.headers["content-security-policy"]
        assert client.head("/", headers={"If-None-Match": etag}).status_code == 304
        changed = client.get("/", headers={"If-None-Match": '"an-older-page"'})
        assert changed.status_code == 200
        assert changed.text == page.text


def test_vendored_files_go_gzipped_to_a_client_that_takes_gzip_and_are_revalidated(
    make_settings: Any,
) -> None:
    vendored = sorted(p for p in VENDOR.iterdir() if p.suffix in (".js", ".css"))
    assert {"mermaid.min.js", "swagger-ui-bundle.js"} <= {p.name for p in vendored}
    for file in vendored:  # each gzipped copy is its file's (vendor/README.md: how to make it)
        assert gzip.decompress(file.with_name(f"{file.name}.gz").read_bytes()) == file.read_bytes()
    with TestClient(create_app(make_settings())) as client:
        path = "/static/vendor/mermaid.min.js"
        file = VENDOR / "mermaid.min.js"
        with client.stream("GET", path, headers={"Accept-Encoding": "gzip"}) as zipped:
            sent = b"".join(zipped.iter_raw())
        assert zipped.headers["content-encoding"] == "gzip"
        assert zipped.headers["content-type"].startswith("text/javascript")
        assert int(zipped.headers["content-length"]) == len(sent) < file.stat().st_size // 3
        assert gzip.decompress(sent) == file.read_bytes()
        plain = client.get(path, headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers
        assert int(plain.headers["content-length"]) == file.stat().st_size
        assert plain.content == file.read_bytes()
        refused = client.get(path, headers={"Accept-Encoding": "gzip;q=0, br"})
        assert "content-encoding" not in refused.headers
        assert zipped.headers["etag"] != plain.headers["etag"]
        # Revalidated each time (no-cache), each form by its own ETag: a 304, no body.
        for sent_as, encoding in ((zipped, "gzip"), (plain, "identity")):
            assert sent_as.headers["cache-control"] == "no-cache"
            assert sent_as.headers["vary"] == "Accept-Encoding"
            etag = sent_as.headers["etag"]
            same = client.get(path, headers={"Accept-Encoding": encoding, "If-None-Match": etag})
            assert same.status_code == 304, encoding
            assert same.headers["cache-control"] == "no-cache"
            assert same.headers["vary"] == "Accept-Encoding"
        assert client.get("/static/js/main.js").headers["cache-control"] == "no-cache"
        assert client.get(f"{path}.gz").status_code == 404  # only ever sent as mermaid.min.js
        # The API is not compressed (nor its streams): only the static files are.
        api = client.get("/openapi.json", headers={"Accept-Encoding": "gzip"})
        assert "content-encoding" not in api.headers


def test_the_docs_page_loads_swagger_ui_from_the_service_and_runs_only_its_own_script(
    make_settings: Any,
) -> None:
    with TestClient(create_app(make_settings())) as client:
        docs = client.get("/docs")
        assert docs.status_code == 200
        assert "http://" not in docs.text
        assert "https://" not in docs.text  # nothing from a CDN: offline, the page still works
        loaded = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
        assert {
            "/static/vendor/swagger-ui-bundle.js",
            "/static/vendor/swagger-ui.css",
        } <= set(loaded)
        for path in loaded:
            assert client.get(path).status_code == 200, path
        assert client.get("/openapi.json").status_code == 200
        policy = dict(
            part.strip().split(" ", 1)
            for part in docs.headers["content-security-policy"].split(";")
        )
        scripts = policy["script-src"].split()
        assert "'unsafe-inline'" not in scripts
        inline = re.findall(r"<script(?![^>]*\ssrc=)[^>]*>(.*?)</script>", docs.text, re.DOTALL)
        assert inline  # Swagger UI starts from one: allowed by its hash
        for script in inline:
            digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
            assert f"'sha256-{digest}'" in scripts
        assert policy["connect-src"] == "'self'"
        assert client.get("/redoc").status_code == 404  # ReDoc would come from a CDN: off
