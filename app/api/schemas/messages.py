"""Chat messages in OpenAI's format, as ``POST /v1/chat/completions`` takes them.

``ChatMessage`` is what the route parses: lenient, so that what it lets through and the turn
refuses (a ``tool`` role, client-side tool calls, content parts a role may not send, text over
``MAX_MESSAGE_CHARS``) gets the turn's own 400 with its own code (``client_tools_unsupported``,
``invalid_content``, ``message_too_long``). Its documented schema is the stricter
``RequestMessage``: one message shape per role, which refuses the same bodies.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    TypeAdapter,
    WithJsonSchema,
    with_config,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from typing_extensions import TypedDict

from agents.turns import MAX_MESSAGE_CHARS

Text = Annotated[str, Field(max_length=MAX_MESSAGE_CHARS)]
# Absent, null or empty: tool calls and results from the client are refused.
NO_TOOL_CALLS: dict[str, Any] = {
    "anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}],
    "description": "Not supported: the service calls its skills' tools itself; client-side "
    "tool calls are refused (400 `client_tools_unsupported`).",
}


class TextPart(BaseModel):
    """A piece of text."""

    model_config = ConfigDict(extra="allow")

    type: Literal["text"]
    text: Text = Field(description="The text.")


class RefusalPart(BaseModel):
    """An assistant's refusal."""

    model_config = ConfigDict(extra="allow")

    type: Literal["refusal"]
    refusal: str = Field(description="The refusal's text.")


# Base64 as providers read it (RFC 4648, padded, no line breaks; at least one byte), and an
# image's URL: http(s), gs:// (litellm hands it to Vertex AI), or its data inline.
BASE64 = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)"
IMAGE_URL = f"^(?:(?i:https?|gs)://[^/?#\\s]+(?:[/?#].*)?|(?i:data:image/[^,]*;base64),{BASE64})$"


class ImageUrl(BaseModel):
    """Where an image is."""

    model_config = ConfigDict(extra="allow")

    url: str = Field(
        min_length=1,
        pattern=IMAGE_URL,
        description="An `http(s):` URL, a `gs://` one, or a `data:image/<type>;base64,` URL.",
    )


class ImagePart(BaseModel):
    """An image."""

    model_config = ConfigDict(extra="allow")

    type: Literal["image_url"]
    image_url: ImageUrl


class InputAudio(BaseModel):
    """Audio, inline."""

    model_config = ConfigDict(extra="allow")

    data: str = Field(min_length=1, pattern=f"^{BASE64}$", description="Base64-encoded audio.")
    format: str = Field(description="Its format.", examples=["wav"])


class AudioPart(BaseModel):
    """A piece of audio."""

    model_config = ConfigDict(extra="allow")

    type: Literal["input_audio"]
    input_audio: InputAudio


class FileRef(BaseModel):
    """A file, by id or inline; one of ``file_id`` and ``file_data`` is needed."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={"anyOf": [{"required": ["file_id"]}, {"required": ["file_data"]}]},
    )

    file_id: Annotated[str | None, WithJsonSchema({"type": "string"})] = Field(
        None, description="An uploaded file's id."
    )
    file_data: Annotated[str | None, WithJsonSchema({"type": "string"})] = Field(
        None, description="The file, base64-encoded (as a data URL)."
    )


class FilePart(BaseModel):
    """A file."""

    model_config = ConfigDict(extra="allow")

    type: Literal["file"]
    file: FileRef


UserPart = Annotated[TextPart | ImagePart | AudioPart | FilePart, Field(discriminator="type")]
AssistantPart = Annotated[TextPart | RefusalPart, Field(discriminator="type")]


class MessageBase(BaseModel):
    """What every message may carry besides its role and content (other keys are ignored)."""

    model_config = ConfigDict(extra="allow")

    role: str = Field(description="Who speaks.")
    name: str | None = Field(None, description="The speaker's name.")
    tool_calls: Annotated[list[Any] | None, WithJsonSchema(NO_TOOL_CALLS)] = None


class SystemMessage(MessageBase):
    """Instructions; on a continued thread they count on its first turn only."""

    role: Literal["system"]
    content: Text | list[TextPart] = Field(description="Text, or text parts.")


class DeveloperMessage(MessageBase):
    """Instructions (OpenAI's newer name for system messages)."""

    role: Literal["developer"]
    content: Text | list[TextPart] = Field(description="Text, or text parts.")


class UserMessage(MessageBase):
    """What the user said; the request's last message is the user's, with some content."""

    role: Literal["user"]
    content: Text | list[UserPart] = Field(
        description="Text, or parts: text, images, audio, files. At most "
        f"{MAX_MESSAGE_CHARS:,} characters of text in all."
    )


class AssistantMessage(MessageBase):
    """An earlier answer, when a client resends the conversation."""

    role: Literal["assistant"]
    content: Text | list[AssistantPart] | None = Field(None, description="Text, or text parts.")


RequestMessage = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage,
    Field(discriminator="role"),
]
_DOCUMENTED = TypeAdapter(RequestMessage)


@with_config(ConfigDict(extra="allow"))
class ContentPart(TypedDict):
    """A content part as the route parses it: any object, kept whole (the turn checks its
    ``type`` and fields). Its name is what a 400 calls a list of them ("a list of content
    parts", ``app.api.validation``)."""


class ChatMessage(BaseModel):
    """One message in OpenAI's chat format (documented as ``RequestMessage``; see above)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(_DOCUMENTED.core_schema)
        return {**schema, "description": "One message, by role, in OpenAI's chat format."}
