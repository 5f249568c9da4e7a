"""Split a message into the requests it makes ("check X and tell me if Y")."""

from __future__ import annotations

import re

# Conjunctions and separators that join independent requests, English and Chinese. A clause
# keeps the marks that end its sentence (a message's "?" and "!" sentences are then the very
# texts a search of the whole message embeds as its sentences, ``query_parts``: one model pass
# for both); a conjunction after the mark goes with the split ("late? and check ...").
_ENDS = "。!?！？"
_JOIN = (
    r"(?:and also|and then|and|also|plus|as well as|then)\s+"
    r"(?=(?:tell|check|show|list|give|find|look|get|what|whether|is|are|does|do|can|"
    r"create|open|make|send|how|when|where|which|who|please)\b)"
)
_SPLIT = re.compile(
    rf"(?:(?<=[{_ENDS}])(?![{_ENDS}])\s*(?:{_JOIN})?|[;；\n]+|,?\s+{_JOIN}|"
    r"(?:，|,)?\s*(?:并且|还有|另外|然后|同时|以及|顺便)\s*|，)",
    re.IGNORECASE,
)


def split_intents(text: str, min_chars: int = 6) -> list[str]:
    """The clauses of ``text`` that could each be a request of their own."""
    parts = [p.strip(" ,，") for p in _SPLIT.split(text) if p and p.strip(" ,，")]
    return [p for p in parts if len(p.rstrip(_ENDS)) >= min_chars] or [text.strip()]


# Words that make one request depend on another ("... then create a work order for it").
_DEPENDS = re.compile(
    r"\b(then|after that|afterwards|based on|using (the|that|its)|for it|its|their|them|"
    r"that one|those)\b|然后|之后|再|根据|它的|它们",
    re.IGNORECASE,
)


def independent(text: str) -> bool:
    """Whether the requests in ``text`` read as independent of one another."""
    return _DEPENDS.search(text) is None


# Greetings, thanks, farewells and questions about the assistant itself, as the whole message:
# small talk never continues the previous request, however short ("hi there, who are you?").
# A greeting in front of a request ("thanks! now cancel the order") is not small talk.
_GREETING = (
    r"(hi|hello|hey|howdy|good (morning|afternoon|evening)|thanks( a lot| so much| again)?|"
    r"thank you( so much| very much| again)?|thx|cheers|bye|goodbye|see you|ok thanks|"
    r"你好|您好|嗨|谢谢|多谢|再见)"
)
_ABOUT_YOU = r"(who are you|what are you|what can you do|你是谁|你能做什么)"
_CLOSING = r"(there|everyone|that'?s all|that is all|it works|all good|没事了)"
_SMALL_TALK = re.compile(
    rf"^\W*(({_GREETING}|{_ABOUT_YOU}|{_CLOSING})([\W\s]+|$))+$",
    re.IGNORECASE,
)


def small_talk(text: str) -> bool:
    """Whether ``text`` is only small talk (so not a follow-up of the previous request)."""
    text = text.strip()
    return len(text) <= 200 and _SMALL_TALK.match(text) is not None
