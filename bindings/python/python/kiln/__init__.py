"""kiln: a fast local LLM inference engine, in process.

    import kiln
    m = kiln.Model("smollm2")
    print(m.generate("The capital of France is", max_tokens=8))
    for ev in m.stream("Once upon a time", max_tokens=32):
        print(ev.text, end="", flush=True)
    print(m.chat([{"role": "user", "content": "Hi!"}]))

See docs/bindings.md in the kiln repository for the whole API.
"""

from ._kiln import Event, KilnError, Model, Stream, __version__

__all__ = ["Event", "KilnError", "Model", "Stream", "__version__"]
