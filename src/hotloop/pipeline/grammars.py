"""Custom tools' grammars compiled at the door (protocol.md §1.11): each distinct grammar once (tools/grammar.py
keeps the result), off the event loop on threads of their own with a large stack (llguidance recurses on deeply
nested rules and would overflow a default stack), within a time bound: a grammar that does not compile, or not in
time, is a 400 naming `tools[i].format.definition`, before anything is stored."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from functools import partial
from queue import SimpleQueue
from typing import Any

from hotloop.errors import InvalidParam
from hotloop.tools.grammar import Grammar, InputCheck, compile_grammar
from hotloop.tools.spec import ToolSpec
from hotloop.wire.builder import InputChecks

COMPILE_TIMEOUT_S = 2.0  # a grammar still compiling after this is refused (its compile runs on, its result kept)
STACK_BYTES = 64 * 1024 * 1024
WORKERS = 2  # compiles at once; the rest wait their turn (a hostile grammar holds one thread, not the server)


class _Compilers:
    """Threads with a large stack, fed through one queue (ThreadPoolExecutor cannot set a thread's stack)."""

    def __init__(self) -> None:
        self._queue: SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = SimpleQueue()
        self._lock = threading.Lock()
        self._started = False

    def submit(self, work: Callable[[], Any]) -> Future[Any]:
        self._start()
        future: Future[Any] = Future()
        self._queue.put((work, future))
        return future

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            previous = threading.stack_size(STACK_BYTES)
            try:
                for n in range(WORKERS):
                    threading.Thread(target=self._run, name=f"hotloop-grammar-{n}", daemon=True).start()
            finally:
                threading.stack_size(previous)
            self._started = True

    def _run(self) -> None:
        while True:
            work, future = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work())
            except BaseException as exc:  # handed to the waiting request
                future.set_exception(exc)


_compilers = _Compilers()


def input_checks(specs: Iterable[ToolSpec]) -> InputChecks | None:
    """The builder's check of a custom call's input against its tool's grammar (wire/builder.py), on every backend:
    one an engine could not constrain (an `openai-chat` upstream), or did not, ends `incomplete`. None: no tool has
    a grammar."""
    grammars = {(spec.name, spec.namespace): spec.grammar for spec in specs if spec.grammar is not None}
    if not grammars:
        return None

    def check(name: str, namespace: str | None) -> InputCheck | None:
        grammar = grammars.get((name, namespace))
        if grammar is None:
            return None
        matcher = compile_grammar(grammar)  # compiled at the door, and kept
        return InputCheck(matcher) if not isinstance(matcher, str) else None

    return check


async def check_grammars(grammars: Sequence[tuple[str, Grammar]], timeout_s: float = COMPILE_TIMEOUT_S) -> None:
    """Compile each (param, grammar) once; raise `InvalidParam` naming the param of the first that fails."""
    for param, grammar in grammars:
        future = _compilers.submit(partial(compile_grammar, grammar))
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        except TimeoutError:
            raise InvalidParam(
                f"The grammar did not compile within {timeout_s:g} s; simplify it.", param=param, code="invalid_value"
            ) from None
        if isinstance(result, str):
            raise InvalidParam(f"The grammar does not compile: {result}", param=param, code="invalid_value")
