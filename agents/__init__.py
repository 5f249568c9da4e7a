"""Skilldesk's brain: models, graphs, skills and workflows, importable without FastAPI."""

import os

# Nothing is fetched at run time: litellm would otherwise download a price list at import,
# and Hugging Face libraries would try the hub before the locally packaged model.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
