"""Count tokens offline with the cl100k tokenizer that litellm ships."""

from __future__ import annotations

import importlib.util
import math
import os
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _encoding() -> Any:
    # The tokenizer files lie in litellm's package; found without importing litellm, whose
    # import builds ~270,000 objects (a server imports it only for providers that need it).
    spec = importlib.util.find_spec("litellm")
    if spec is not None and spec.submodule_search_locations:
        folder = os.path.join(
            spec.submodule_search_locations[0], "litellm_core_utils", "tokenizers"
        )
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", folder)
    import tiktoken

    return tiktoken.get_encoding("cl100k_base")


def count_tokens(text: str) -> int:
    """Tokens of ``text`` as OpenAI's cl100k tokenizer counts them."""
    return len(_encoding().encode(text, disallowed_special=()))


# Providers' tokenizers differ from cl100k (Qwen, Llama, Claude count some texts higher):
# an estimate that must not fall short adds this share.
MARGIN = 1.25


def estimate_tokens(text: str) -> int:
    """A conservative estimate of the tokens ``text`` costs any provider: cl100k's count
    plus a margin. Byte-level BPE never makes more tokens than the text has UTF-8 bytes, so
    callers can skip the count when the bytes alone stay under their limit."""
    return math.ceil(count_tokens(text) * MARGIN)
