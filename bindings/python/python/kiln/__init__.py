"""kiln: a fast local LLM inference engine, in process.

    import kiln
    m = kiln.Model("smollm2")
    print(m.generate("The capital of France is", max_tokens=8))
    for ev in m.stream("Once upon a time", max_tokens=32):
        print(ev.text, end="", flush=True)
    print(m.chat([{"role": "user", "content": "Hi!"}]))
    reply = m.chat_message(messages, tools=[...])   # .content, .reasoning, .tool_calls
    vectors = kiln.Model("all-minilm").embed(["first text", "second text"])

See docs/bindings.md in the kiln repository for the whole API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Union, overload

from ._kiln import Event, KilnError, Reply, Stream, ToolCall, __version__
from ._kiln import Model as _Model

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._kiln import ChatOptions, GenOptions, Message, Prompt


class Model(_Model):
    """A model running in this process; safe to share between threads and tasks."""

    __slots__ = ()

    async def agenerate(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> str:
        """`generate` for asyncio: the engine works while the event loop runs.

        Cancelling the awaiting task cancels the request.
        """
        return await self._agenerate(prompt, **opts)

    async def achat(self, messages: Sequence[Message], **opts: Unpack[ChatOptions]) -> str:
        """`chat` for asyncio."""
        return await self._achat(messages, **opts)

    async def achat_message(self, messages: Sequence[Message], **opts: Unpack[ChatOptions]) -> Reply:
        """`chat_message` for asyncio."""
        return await self._achat_message(messages, **opts)

    @overload
    async def aembed(self, texts: str, *, dimensions: Optional[int] = None, truncate: bool = True) -> List[float]: ...
    @overload
    async def aembed(
        self, texts: Sequence[str], *, dimensions: Optional[int] = None, truncate: bool = True
    ) -> List[List[float]]: ...
    async def aembed(
        self, texts: Union[str, Sequence[str]], *, dimensions: Optional[int] = None, truncate: bool = True
    ) -> Union[List[float], List[List[float]]]:
        """`embed` for asyncio: the vectors are computed while the event loop runs."""
        return await self._aembed(texts, dimensions=dimensions, truncate=truncate)


__all__ = ["Event", "KilnError", "Model", "Reply", "Stream", "ToolCall", "__version__"]
