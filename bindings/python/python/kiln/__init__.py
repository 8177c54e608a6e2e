"""kiln: a fast local LLM inference engine, in process.

    import kiln
    m = kiln.Model("smollm2")
    print(m.generate("The capital of France is", max_tokens=8))
    for ev in m.stream("Once upon a time", max_tokens=32):
        print(ev.text, end="", flush=True)
    print(m.chat([{"role": "user", "content": "Hi!"}]))

See docs/bindings.md in the kiln repository for the whole API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ._kiln import Event, KilnError, Stream, __version__
from ._kiln import Model as _Model

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._kiln import GenOptions, Message, Prompt


class Model(_Model):
    """A model running in this process; safe to share between threads and tasks."""

    __slots__ = ()

    async def agenerate(self, prompt: Prompt, **opts: Unpack[GenOptions]) -> str:
        """`generate` for asyncio: the engine works while the event loop runs.

        Cancelling the awaiting task cancels the request.
        """
        return await self._agenerate(prompt, **opts)

    async def achat(self, messages: Sequence[Message], **opts: Unpack[GenOptions]) -> str:
        """`chat` for asyncio."""
        return await self._achat(messages, **opts)


__all__ = ["Event", "KilnError", "Model", "Stream", "__version__"]
