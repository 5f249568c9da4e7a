"""Signing in with an API key: kept for the browser session only, sent as a Bearer token; a
user does not see another user's thread, and a refused, revoked or expired key asks for
another, saying which."""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e.accessibility import check_in_light_and_dark
from tests.e2e.conftest import screenshot
from tests.fakellm import FakeLLM, Reply
from tests.integration.test_server_process import SKILLDESK, Service

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdef"


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"SKILLDESK_API_KEYS": f"alice:chat:{ALICE} bob:chat,approve:{BOB} ops:admin:{ADMIN}"}


def sign_in(page: Any, key: str) -> None:
    page.get_by_label("API key", exact=True).fill(key)
    with page.expect_request("**/v1/me") as me:
        page.get_by_label("API key", exact=True).press("Enter")
    assert me.value.headers["authorization"] == f"Bearer {key}"


def test_a_user_signs_in_with_a_key_and_is_refused_another_users_thread(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hello Alice."))
    page.goto("/")
    expect(page.locator("#banner")).to_contain_text("This service needs an API key")
    expect(page.get_by_label("API key", exact=True)).to_be_focused()
    check_in_light_and_dark(page, "sign-in")

    sign_in(page, ALICE)
    expect(page.locator("#mode")).to_have_text("Signed in as alice (chat)")
    expect(page.get_by_role("button", name="Approvals")).to_be_hidden()  # no approve scope
    assert page.evaluate("sessionStorage.getItem('skilldesk.key')") == ALICE
    assert page.evaluate("localStorage.length") == 0  # the session only
    page.get_by_role("textbox", name="Message").fill("hello")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_have_text("Hello Alice.")
    thread = page.evaluate("sessionStorage.getItem('skilldesk.thread')")

    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#mode")).to_have_text("Not signed in")
    assert page.evaluate("sessionStorage.getItem('skilldesk.key')") is None
    sign_in(page, BOB)
    expect(page.locator("#mode")).to_have_text("Signed in as bob (approve, chat)")
    expect(page.locator("#thread-list")).to_contain_text("No threads yet.")
    expect(page.get_by_role("button", name="Approvals")).to_be_visible()

    # A link to Alice's thread, opened by Bob: refused, nothing of it shown.
    page.goto("about:blank")
    page.goto(f"/#thread={thread}")
    expect(page.locator("#banner")).to_contain_text("does not exist, or it is not yours")
    expect(page.locator(".message")).to_have_count(0)

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, "not-a-key-0123456789abcdef")
    expect(page.locator("#banner")).to_contain_text("Your API key was refused")
    expect(page.get_by_label("API key", exact=True)).to_be_visible()


def keys(service: Service, *args: str) -> Any:
    """`skilldesk keys ... --json` on the service's own store, as its operator runs it."""
    env = {**service.env, "SKILLDESK_DATA_DIR": str(service.data_dir)}
    done = subprocess.run(
        [SKILLDESK, "keys", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout) if "--json" in args else done.stdout


def test_a_revoked_key_and_an_expired_key_are_said_so_and_sign_in_is_asked_again(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    fake_llm.script(Reply(content="Hello Carol."))
    carol = keys(service, "create", "carol", "--expires-in", "1h", "--json")
    page.goto("/")
    sign_in(page, carol["key"])
    expect(page.locator("#mode")).to_have_text("Signed in as carol (chat)")
    page.get_by_role("textbox", name="Message").fill("hello")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_have_text("Hello Carol.")

    keys(service, "revoke", carol["id"])
    page.get_by_role("textbox", name="Message").fill("still there?")
    page.keyboard.press("Enter")
    expect(page.locator("#banner")).to_contain_text(
        "Your API key was revoked — sign in again with another key."
    )
    expect(page.locator("#mode")).to_have_text("Key revoked")
    expect(page.get_by_label("API key", exact=True)).to_be_focused()
    assert page.evaluate("sessionStorage.getItem('skilldesk.key')") is None

    dave = keys(service, "create", "dave", "--expires-in", "8s", "--json")
    sign_in(page, dave["key"])
    expect(page.locator("#mode")).to_have_text("Signed in as dave (chat)")
    time.sleep(max(0.0, dave["expires"] - time.time()) + 0.5)
    page.reload()  # the key the tab kept has run out meanwhile
    expect(page.locator("#banner")).to_contain_text(
        "Your API key has expired — sign in again with a new key."
    )
    expect(page.locator("#mode")).to_have_text("Key expired")
    expect(page.get_by_label("API key", exact=True)).to_be_visible()


def test_an_admin_makes_a_key_in_the_page_shown_once_and_revokes_it(
    page: Any, fake_llm: FakeLLM
) -> None:
    page.goto("/")
    sign_in(page, ALICE)
    expect(page.locator("#mode")).to_have_text("Signed in as alice (chat)")
    expect(page.get_by_role("button", name="API keys")).to_be_hidden()  # not an admin
    page.get_by_role("button", name="Sign out").click()

    sign_in(page, ADMIN)
    page.get_by_role("button", name="API keys").click()
    keys = page.locator("#key-table tbody tr")
    expect(keys).to_have_count(3)  # the settings' keys, which the page cannot revoke
    expect(page.get_by_role("button", name=re.compile(r"Revoke .* \(alice\)"))).to_be_disabled()
    page.get_by_label("User").fill("carol")
    page.get_by_label("What it is for").fill("carol's laptop")
    page.get_by_role("button", name="Create key").click()
    made = page.get_by_label("New API key")
    expect(made).to_have_text(re.compile(r"^sdk_"))
    expect(keys).to_have_count(4)
    carol = page.locator("#key-table tbody tr", has_text="carol")
    expect(carol).to_contain_text("in force")
    expect(carol).to_contain_text("carol's laptop")
    check_in_light_and_dark(page, "keys")
    screenshot(page, "api-keys")
    token = made.inner_text()

    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#key-made")).to_be_hidden()  # shown once, not left for the next user
    assert page.locator("#key-made-value").text_content() == ""  # nor in the page's DOM
    expect(page.locator("#key-table tbody tr")).to_have_count(0)
    sign_in(page, token)
    expect(page.locator("#mode")).to_have_text("Signed in as carol (chat)")
    page.goto("about:blank")
    page.goto("/#keys")  # not an admin: the chat, and no refusal to show
    expect(page.locator("#view-chat")).to_be_visible()
    expect(page.locator("#view-keys")).to_be_hidden()
    expect(page.locator("#mode")).to_have_text("Signed in as carol (chat)")
    expect(page.locator("#banner")).to_be_hidden()
    page.get_by_role("button", name="Sign out").click()

    sign_in(page, ADMIN)
    page.goto("about:blank")
    page.goto("/#keys")  # an admin: the address opens the keys view
    expect(page.locator("#view-keys")).to_be_visible()
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.get_by_role("button", name=re.compile(r"Revoke .* \(carol\)")).click()
    expect(page.locator("#key-status")).to_contain_text("requests with it are refused")
    expect(carol).to_contain_text("revoked")
    assert asked[0].startswith("Revoke key_"), asked
    assert "(carol)" in asked[0], asked
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, token)
    expect(page.locator("#banner")).to_contain_text("Your API key was revoked")


def test_a_key_shown_once_is_cleared_when_the_admins_key_is_refused(page: Any) -> None:
    page.goto("/")
    sign_in(page, ADMIN)
    page.get_by_role("button", name="API keys").click()
    page.get_by_label("User").fill("carol")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_label("New API key")).to_have_text(re.compile(r"^sdk_"))

    # The key the page holds is refused (not one said to be revoked or expired: a plain 401).
    page.evaluate("sessionStorage.setItem('skilldesk.key', 'no-such-key-0123456789')")
    page.get_by_label("User").fill("dave")
    page.get_by_role("button", name="Create key").click()
    expect(page.locator("#banner")).to_contain_text("Your API key was refused")
    expect(page.locator("#key-made")).to_be_hidden()  # not left for whoever signs in next
    assert page.locator("#key-made-value").text_content() == ""  # nor in the page's DOM
    expect(page.locator("#key-table tbody tr")).to_have_count(0)


def test_older_keys_are_shown_a_page_at_a_time(page: Any, service: Service) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=service.url, headers=admin, timeout=30) as client:
        for n in range(101):
            made = client.post("/v1/admin/keys", json={"user": f"user{n:03d}", "scopes": ["chat"]})
            assert made.status_code == 201, made.text
    page.goto("/")
    sign_in(page, ADMIN)
    page.get_by_role("button", name="API keys").click()
    rows = page.locator("#key-table tbody tr")
    expect(rows).to_have_count(100 + 3)  # the newest hundred, then the settings' keys
    expect(page.locator("#key-table tbody tr", has_text="user000")).to_have_count(0)
    older = page.get_by_role("button", name="Show older keys")
    older.click()
    expect(rows).to_have_count(101 + 3)
    expect(page.locator("#key-table tbody tr", has_text="user000")).to_have_count(1)
    expect(older).to_be_hidden()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=re.compile(r"Revoke .* \(user000\)")).click()
    expect(page.locator("#key-table tbody tr", has_text="user000")).to_contain_text("revoked")
    expect(rows).to_have_count(101 + 3)  # revoked in place: the older keys stay shown
    page.get_by_role("button", name="Sign out").click()
    expect(older).to_be_hidden()


def test_signing_out_or_a_revoked_key_leaves_none_of_the_users_threads_on_screen(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    fake_llm.script(Reply(content="Hello Erin."))
    erin = keys(service, "create", "erin", "--json")
    page.goto("/")
    sign_in(page, erin["key"])
    page.get_by_role("textbox", name="Message").fill("my secret plans")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_have_text("Hello Erin.")
    expect(page.locator("#thread-list .thread")).to_contain_text("my secret plans")

    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#mode")).to_have_text("Not signed in")
    expect(page.locator("#thread-list .thread")).to_have_count(0)
    expect(page.locator(".message")).to_have_count(0)

    sign_in(page, erin["key"])
    page.locator("#thread-list .thread").first.click()
    expect(page.locator(".message.user")).to_contain_text("my secret plans")
    keys(service, "revoke", erin["id"])
    page.get_by_role("button", name="New thread").click()  # the list is asked for again
    page.get_by_role("textbox", name="Message").fill("still there?")
    page.keyboard.press("Enter")
    expect(page.locator("#mode")).to_have_text("Key revoked")
    expect(page.locator("#thread-list")).not_to_contain_text("my secret plans")
    expect(page.locator("#messages")).not_to_contain_text("my secret plans")


def test_a_thread_link_opened_before_signing_in_opens_the_thread_after_it(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    # Signing in forgot the page's state and counted that as the user having moved on: the
    # linked thread was dropped for a new conversation.
    fake_llm.script(Reply(content="Your parcel left today."), Reply(content="Another one."))
    alice = {"Authorization": f"Bearer {ALICE}"}
    for thread in ("linked-a", "linked-b"):
        made = httpx.post(
            f"{service.url}/v1/threads/{thread}/runs/stream",
            json={"message": f"where is my parcel? ({thread})"},
            headers=alice,
            timeout=60,
        )
        assert made.status_code == 200, made.text
    page.goto("/#thread=linked-a")
    expect(page.locator("#banner")).to_contain_text("This service needs an API key")
    sign_in(page, ALICE)
    expect(page.locator("#thread-title")).to_have_text("where is my parcel? (linked-a)")
    expect(page.locator(".message.assistant")).to_contain_text("Your parcel left today.")
    # A link pasted into the address of the open page opens its thread too.
    page.evaluate("location.hash = '#thread=linked-b'")
    expect(page.locator("#thread-title")).to_have_text("where is my parcel? (linked-b)")
    expect(page.locator(".message.assistant")).to_contain_text("Another one.")


@pytest.mark.parametrize("extra_env", [{}])  # development mode: no key yet
def test_the_first_key_made_in_the_page_is_an_admin_key_and_the_page_signs_in_with_it(
    page: Any, fake_llm: FakeLLM
) -> None:
    # It was a chat-only key by default: the service then asked for a key, the header still
    # said development mode, and the key hid the keys, the approvals and every earlier thread.
    fake_llm.script(Reply(content="Made before any key."))
    page.goto("/")
    expect(page.locator("#mode")).to_have_text("Development mode (no key needed)")
    page.get_by_role("textbox", name="Message").fill("a thread of the local user")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_have_text("Made before any key.")

    page.get_by_role("button", name="API keys").click()
    expect(page.locator("#key-first")).to_contain_text("The first key ends development mode")
    admin = page.get_by_role("checkbox", name="admin")
    expect(admin).to_be_checked()  # by default, for the first key
    admin.uncheck()
    page.get_by_role("textbox", name="User").fill("alice")
    page.get_by_role("button", name="Create key").click()
    expect(page.locator("#key-status")).to_contain_text("The first key must include admin")
    expect(page.locator("#key-made")).to_be_hidden()
    check_in_light_and_dark(page, "keys, the first key")
    admin.check()
    page.get_by_role("button", name="Create key").click()
    made = page.get_by_label("New API key")
    expect(made).to_have_text(re.compile(r"^sdk_"))
    expect(page.locator("#key-made")).to_contain_text("needs a key from now on")
    expect(page.locator("#mode")).to_have_text("Not signed in")  # development mode is over
    expect(page.locator("#key-first")).to_be_hidden()
    # QA: development mode's threads stayed listed (and would not open: a key is needed now).
    expect(page.locator("#thread-list .thread")).to_have_count(0)
    token = made.inner_text()

    with page.expect_request("**/v1/me") as me:
        page.get_by_role("button", name="Sign in with this key").click()
    assert me.value.headers["authorization"] == f"Bearer {token}"
    expect(page.locator("#mode")).to_have_text("Signed in as alice (admin, chat)")
    expect(made).to_have_text(token)  # still shown to whoever made it, to copy
    expect(page.locator("#key-table tbody tr", has_text="alice")).to_contain_text("(this key)")
    expect(page.get_by_role("button", name="Approvals")).to_be_visible()

    # The threads made before any key belong to no user: the admin is shown every user's.
    page.get_by_role("button", name="Chat").click()
    everyone = page.get_by_label("Everyone's threads")
    expect(everyone).to_be_checked()
    listed = page.locator("#thread-list .thread")
    expect(listed).to_contain_text("a thread of the local user")
    expect(listed).to_contain_text("by the local user")
    with page.expect_request(lambda r: "/v1/threads?" in r.url) as asked:
        everyone.uncheck()
    assert "all=true" not in asked.value.url
    expect(page.locator("#thread-list")).to_contain_text("No threads yet.")
    with page.expect_request(lambda r: "/v1/threads?" in r.url) as asked:
        everyone.check()
    assert "all=true" in asked.value.url
    listed.first.click()
    expect(page.locator(".message.assistant")).to_contain_text("Made before any key.")


@pytest.mark.parametrize("extra_env", [{}])  # development mode: no key yet
def test_a_key_made_elsewhere_ends_development_mode_and_the_header_says_so(
    page: Any, service: Service
) -> None:
    page.goto("/")
    expect(page.locator("#mode")).to_have_text("Development mode (no key needed)")
    keys(service, "create", "bob", "--json")
    time.sleep(5.5)  # an open service looks for a key made meanwhile every few seconds
    page.get_by_role("textbox", name="Message").fill("hello")
    page.keyboard.press("Enter")
    expect(page.locator("#banner")).to_contain_text("This service needs an API key")
    expect(page.locator("#mode")).to_have_text("Not signed in")
    # Refused, not sent: no bubble, the message back in the box.
    expect(page.locator(".message")).to_have_count(0)
    expect(page.get_by_role("textbox", name="Message")).to_have_value("hello")


def test_sign_in_with_a_key_opens_the_form_and_never_closes_it(page: Any) -> None:
    page.goto("/")
    form = page.locator("#sign-in")
    toggle = page.get_by_role("button", name="Sign in with a key")
    expect(form).to_be_visible()  # the service asks for a key: open already
    expect(toggle).to_have_attribute("aria-expanded", "true")
    toggle.click()  # it used to close the form
    expect(form).to_be_visible()
    expect(page.get_by_label("API key", exact=True)).to_be_focused()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    page.get_by_role("button", name="Cancel").click()
    expect(form).to_be_hidden()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(toggle).to_be_focused()
    page.keyboard.press("Enter")
    expect(form).to_be_visible()
    expect(page.get_by_label("API key", exact=True)).to_be_focused()


def test_at_phone_width_the_keys_table_scrolls_within_itself(page: Any) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/")
    sign_in(page, ADMIN)
    page.get_by_role("button", name="API keys").click()
    expect(page.locator("#key-table tbody tr")).to_have_count(3)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide at 390"
    region = page.get_by_role("region", name="Keys (never the keys themselves)")
    assert region.evaluate("r => r.scrollWidth > r.clientWidth")  # the table scrolls itself
    expect(page.locator("#key-table tbody tr", has_text="ops")).to_contain_text("(this key)")
    check_in_light_and_dark(page, "keys at phone width")


def test_revoking_ones_own_key_asks_first_and_a_draft_is_not_left_after_sign_out(
    page: Any, service: Service
) -> None:
    mine = keys(service, "create", "frank", "-s", "chat", "-s", "admin", "--json")
    page.goto("/")
    sign_in(page, mine["key"])
    page.get_by_role("textbox", name="Message").fill("a draft of frank's")
    page.get_by_role("button", name="API keys").click()
    own = page.locator("#key-table tbody tr", has_text="frank")
    expect(own).to_contain_text("(this key)")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    own.get_by_role("button", name=re.compile("Revoke")).click()
    expect(own).to_contain_text("in force")  # not revoked: the question was dismissed
    assert "the key this page is signed in with" in asked[0], asked
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("button", name="Chat").click()
    expect(page.get_by_role("textbox", name="Message")).to_have_value("")
