"""Who is calling: API keys, on-behalf-of tokens, the principal every route is served for."""
