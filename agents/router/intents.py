"""Split a message into the requests it makes ("check X and tell me if Y")."""

from __future__ import annotations

import re

# Conjunctions and separators that join independent requests, English and Chinese.
_SPLIT = re.compile(
    r"(?:[;；。!?！？\n]+|,?\s+(?:and also|and then|and|also|plus|as well as|then)\s+"
    r"(?=(?:tell|check|show|list|give|find|look|get|what|whether|is|are|does|do|can|"
    r"create|open|make|send|how|when|where|which|who|please)\b)|(?:，|,)?\s*(?:并且|还有|另外|"
    r"然后|同时|以及|顺便)\s*|，)",
    re.IGNORECASE,
)


def split_intents(text: str, min_chars: int = 6) -> list[str]:
    """The clauses of ``text`` that could each be a request of their own."""
    parts = [p.strip(" ,，") for p in _SPLIT.split(text) if p and p.strip(" ,，")]
    return [p for p in parts if len(p) >= min_chars] or [text.strip()]


# Words that make one request depend on another ("... then create a work order for it").
_DEPENDS = re.compile(
    r"\b(then|after that|afterwards|based on|using (the|that|its)|for it|its|their|them|"
    r"that one|those)\b|然后|之后|再|根据|它的|它们",
    re.IGNORECASE,
)


def independent(text: str) -> bool:
    """Whether the requests in ``text`` read as independent of one another."""
    return _DEPENDS.search(text) is None


# Greetings, thanks, farewells and questions about the assistant itself: small talk that never
# continues the previous request, however short ("hi there, who are you?").
_SMALL_TALK = re.compile(
    r"^\W*(hi|hello|hey|howdy|good (morning|afternoon|evening)|thanks|thank you|thx|cheers|"
    r"bye|goodbye|see you)\b|\b(who are you|what are you|what can you do)\b|"
    r"^\W*(你好|您好|嗨|谢谢|多谢|再见)|你是谁|你能做什么",
    re.IGNORECASE,
)
# What makes a short message lean on the previous one ("and the other one?", "what about 7?").
_CONTINUES = re.compile(
    r"\b(and|also|what about|how about|same|again|other|another|that|those|it|its)\b|\d|"
    r"还有|那个|另一个|同样|也",
    re.IGNORECASE,
)


def small_talk(text: str) -> bool:
    """Whether ``text`` is only small talk (so not a follow-up of the previous request)."""
    return _SMALL_TALK.search(text) is not None and _CONTINUES.search(text) is None
