from os import PathLike
from typing import Any, AsyncIterator, Awaitable, Iterator, List, Mapping, Optional, Sequence, TypedDict, Union

from typing_extensions import NotRequired, Unpack

__version__: str

Prompt = Union[str, Sequence[int]]

class Message(TypedDict):
    role: str
    content: str
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
    response_format: Optional[Mapping[str, Any]]
    """{"type": "json_object"} or {"type": "json_schema", "json_schema": {"schema": {...}}}."""

class KilnError(RuntimeError):
    """The engine failed or refused a request (bad arguments raise ValueError or TypeError)."""

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
        """On the last event: "stop", "length" or "cancelled"."""

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
    def ctx_size(self) -> int: ...
    @property
    def path(self) -> PathLike[str]: ...
    def generate(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> str: ...
    def stream(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> Stream: ...
    def chat(self, messages: Sequence[Message], **opts: Unpack[GenOptions]) -> str: ...
    def chat_stream(self, messages: Sequence[Message], **opts: Unpack[GenOptions]) -> Stream: ...
    def _agenerate(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> Awaitable[str]: ...
    def astream(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> Stream: ...
    def _achat(self, messages: Sequence[Message], **opts: Unpack[GenOptions]) -> Awaitable[str]: ...
    def tokenize(self, text: str, *, add_special: bool = True) -> List[int]: ...
    def detokenize(self, ids: Sequence[int]) -> str: ...
