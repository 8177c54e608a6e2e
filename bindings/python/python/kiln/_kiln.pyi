from os import PathLike
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Dict,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypedDict,
    Union,
    overload,
)

from typing_extensions import NotRequired, Unpack

__version__: str

Prompt = Union[str, Sequence[int]]

class Message(TypedDict):
    role: str
    content: Optional[str]
    tool_calls: NotRequired[List[Mapping[str, Any]]]
    tool_call_id: NotRequired[str]
    name: NotRequired[str]

class GenOptions(TypedDict, total=False):
    max_tokens: Optional[int]
    """Most tokens to generate (default 256, at least 1)."""
    temperature: Optional[float]
    """0 (the default) is greedy."""
    top_p: Optional[float]
    top_k: Optional[int]
    min_p: Optional[float]
    seed: Optional[int]
    stop: Optional[Union[str, Sequence[str]]]
    """Strings that end the generation (not included in the text)."""
    logprobs: bool
    """Fill `Event.logprob` (off by default: it costs a little per token)."""
    ignore_eos: bool
    segments: Optional[Sequence[str]]
    """Completions only: texts placed before the prompt, each a segment whose KV is computed
    once and reused wherever it appears (docs/segment-cache.md). In a chat, mark content parts
    {"type": "text", "text": ..., "cache": "segment"} instead."""
    response_format: Optional[Mapping[str, Any]]
    """{"type": "json_object"}, {"type": "json_schema", "json_schema": {"schema": {...}}},
    {"type": "grammar", "grammar": "..."} (Lark) or {"type": "text"}."""

class ChatOptions(GenOptions, total=False):
    tools: Optional[Sequence[Mapping[str, Any]]]
    """OpenAI function tools: [{"type": "function", "function": {"name", "description", "parameters"}}]
    (`chat_message` and `chat_stream`; `chat` returns text only and refuses them)."""
    tool_choice: Optional[Union[Literal["auto", "none", "required"], Mapping[str, Any]]]
    """"auto" (the default with tools), "none", "required", or {"type": "function", "function": {"name": ...}}."""
    parallel_tool_calls: Optional[bool]
    """Several calls in one answer when a call is required (default True)."""
    reasoning_effort: Optional[Literal["minimal", "low", "medium", "high"]]
    """For chat templates that read it."""
    chat_template_kwargs: Optional[Mapping[str, Any]]
    """More chat template variables, e.g. {"enable_thinking": False}."""

class KilnError(RuntimeError):
    """The engine failed or refused a request (bad arguments raise ValueError or TypeError)."""

class ToolCall:
    """A call the model made; `json.loads(call.arguments)` is the arguments object."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def arguments(self) -> str:
        """The arguments object as compact JSON text."""

class Reply:
    """A whole chat answer (`Model.chat_message`)."""

    @property
    def content(self) -> str: ...
    @property
    def reasoning(self) -> Optional[str]:
        """The reasoning of a model that reasons (else None)."""
    @property
    def tool_calls(self) -> List[ToolCall]: ...
    @property
    def finish_reason(self) -> str:
        """"stop", "length", "cancelled" or "tool_calls"."""
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    def to_message(self) -> Dict[str, Any]:
        """The answer as an assistant message to append to the conversation."""

class Event:
    """A generated token (`eos` False), or the last event of a stream (`eos` True, `id` None)."""

    @property
    def id(self) -> Optional[int]: ...
    @property
    def text(self) -> str: ...
    @property
    def logprob(self) -> Optional[float]: ...
    @property
    def eos(self) -> bool: ...
    @property
    def finish_reason(self) -> Optional[str]:
        """On the last event: "stop", "length", "cancelled" or "tool_calls"."""
    @property
    def reasoning(self) -> str:
        """Reasoning text this event makes visible (a chat answer of a model that reasons)."""
    @property
    def tool_calls(self) -> List[ToolCall]:
        """Tool calls this event completes (a chat stream with `tools`)."""

class Stream(Iterator[Event], AsyncIterator[Event]):
    """A request's events. Leaving the loop early cancels the request and frees its KV cache."""

    @property
    def prompt_tokens(self) -> int: ...
    def __iter__(self) -> "Stream": ...
    def __next__(self) -> Event: ...
    def __aiter__(self) -> "Stream": ...
    def __anext__(self) -> Awaitable[Event]: ...
    def cancel(self) -> None: ...

class Model:
    """A model running in this process; safe to share between threads and tasks."""

    def __init__(
        self,
        model: str = "smollm2",
        *,
        device: Optional[str] = None,
        threads: Optional[int] = None,
        ctx_size: Optional[int] = None,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> Literal["generate", "embed", "rerank"]:
        """What the model does; the other methods raise ValueError."""
    @property
    def ctx_size(self) -> int:
        """Context length in tokens (an embedding model: its longest input)."""
    @property
    def dimensions(self) -> Optional[int]:
        """Width of an embedding model's vectors."""
    @property
    def path(self) -> PathLike[str]: ...
    def generate(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> str: ...
    def stream(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> Stream: ...
    def chat(self, messages: Sequence[Message], **opts: Unpack[ChatOptions]) -> str:
        """The answer's content (reasoning left out; `tools` are refused: use `chat_message`)."""
    def chat_message(self, messages: Sequence[Message], **opts: Unpack[ChatOptions]) -> Reply: ...
    def chat_stream(self, messages: Sequence[Message], **opts: Unpack[ChatOptions]) -> Stream: ...
    def _agenerate(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> Awaitable[str]: ...
    def astream(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> Stream: ...
    def _achat(self, messages: Sequence[Message], **opts: Unpack[ChatOptions]) -> Awaitable[str]: ...
    def _achat_message(self, messages: Sequence[Message], **opts: Unpack[ChatOptions]) -> Awaitable[Reply]: ...
    @overload
    def embed(self, texts: str, *, dimensions: Optional[int] = None, truncate: bool = True) -> List[float]: ...
    @overload
    def embed(
        self, texts: Sequence[str], *, dimensions: Optional[int] = None, truncate: bool = True
    ) -> List[List[float]]: ...
    def _aembed(
        self, texts: Union[str, Sequence[str]], *, dimensions: Optional[int] = None, truncate: bool = True
    ) -> Awaitable[Union[List[float], List[List[float]]]]: ...
    def rerank(self, query: str, documents: Sequence[str], *, truncate: bool = False) -> List[Tuple[int, float]]:
        """(index, score) of each document, best first (a reranker)."""
    def tokenize(self, text: str, *, add_special: bool = True) -> List[int]: ...
    def detokenize(self, ids: Sequence[int]) -> str: ...
