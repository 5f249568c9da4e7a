"""The API's documentation page (/docs, Swagger UI) offline: drawn from the service's own files,
its one inline script allowed by the Content-Security-Policy, its requests sent to the service."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.integration.test_server_process import Service


def test_the_docs_page_draws_the_api_and_tries_a_route_with_nothing_from_elsewhere(
    page: Any, service: Service
) -> None:
    elsewhere: list[str] = []

    def only_the_service(route: Any) -> None:  # as offline: any other host is unreachable
        if route.request.url.startswith(f"{service.url}/"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_service)
    page.goto("/docs")
    health = page.locator(".opblock").filter(has_text="/healthz")
    expect(health).to_have_count(1)
    expect(page.locator(".opblock-summary-path", has_text="/v1/threads").first).to_be_visible()
    health.locator(".opblock-summary").click()
    health.get_by_role("button", name="Try it out").click()
    health.get_by_role("button", name="Execute").click()
    expect(health.locator(".live-responses-table tr.response .response-col_status")).to_have_text(
        "200"
    )
    assert elsewhere == []
