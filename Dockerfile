# CPU-only image of the Skilldesk service, installed from the same pinned constraints.
#
# The image binds 0.0.0.0, so it refuses to start without API keys. Give it some:
#   docker run -e SKILLDESK_API_KEYS="alice:chat,tools:$(openssl rand -hex 32)" ...
#   (or -e SKILLDESK_API_KEYS_FILE=/run/secrets/keys.yaml, or `skilldesk keys create` in
#   the container against the same data volume or PostgreSQL store: `--create` on a new
#   volume, whose store the refused start has not made yet)
# or, on a trusted network only (every caller is then an admin):
#   docker run -e SKILLDESK_AUTH_DISABLED=true ...
#
# The wheel is built in a stage of its own: the image holds the installed package only, with
# the bundled skills, workflows and prompts inside it (setup.py), as `pip install` gives it,
# and no source tree beside it that could hide a file the package lacks.
FROM python:3.11-slim AS wheel

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY app ./app
COPY agents ./agents
COPY skills ./skills
COPY workflows ./workflows
COPY prompts ./prompts
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    HF_HUB_OFFLINE=1 \
    SKILLDESK_HOST=0.0.0.0 \
    SKILLDESK_DATA_DIR=/app/data

RUN apt-get update \
    && apt-get install -y --no-install-recommends espeak-ng curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 skilldesk

WORKDIR /app
COPY constraints.txt ./
# torch first, from PyTorch's CPU wheel index, so no multi-GB CUDA build is pulled in.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install -c constraints.txt --index-url "$TORCH_INDEX_URL" torch==2.13.0
COPY --from=wheel /wheels /wheels
RUN pip install -c constraints.txt /wheels/*.whl \
    && rm -rf /wheels \
    && mkdir -p /app/data && chown skilldesk:skilldesk /app/data

USER skilldesk
VOLUME ["/app/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8000/healthz || exit 1
CMD ["skilldesk", "serve"]
