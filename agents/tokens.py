"""Count tokens offline with the cl100k tokenizer that litellm ships."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import litellm.litellm_core_utils.tokenizers as bundled

    os.environ.setdefault("TIKTOKEN_CACHE_DIR", os.path.dirname(bundled.__file__))
    import tiktoken

    return tiktoken.get_encoding("cl100k_base")


def count_tokens(text: str) -> int:
    """Tokens of ``text`` as OpenAI's cl100k tokenizer counts them."""
    return len(_encoding().encode(text, disallowed_special=()))
