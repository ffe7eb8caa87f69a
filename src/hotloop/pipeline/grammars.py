"""Custom tools' grammars compiled at the door (protocol.md §1.11): each distinct grammar once (tools/grammar.py
keeps the result, and compiles on a thread with a large stack), off the event loop, a few at once, within a time
bound from the compile's start: a grammar that does not compile, or not in time, is a 400 naming
`tools[i].format.definition`, before anything is stored; one that took too long is refused at once next time."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from hotloop.errors import InvalidParam, ServerBusy
from hotloop.tools.grammar import Grammar, InputCheck, compile_grammar
from hotloop.tools.spec import ToolSpec
from hotloop.wire.builder import InputChecks

COMPILE_TIMEOUT_S = 2.0  # the default: a grammar still compiling after this is refused, and again later
QUEUE_TIMEOUT_S = 10.0  # waiting for a free compile slot: past it the request is refused, the server being busy
WORKERS = 4  # compiles at once; the rest wait their turn (a hostile grammar holds one slot, not the server)
SLOW_REMEMBERED = 1024

# compile_grammar runs each compile on a thread with a large stack of its own (tools/grammar.py); these threads
# only bound how many run at once.
_pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="hotloop-grammar")
_slow: OrderedDict[Grammar, None] = OrderedDict()  # grammars refused for their compile time: refused at once again


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
    """Compile each (param, grammar) once; raise `InvalidParam` naming the param of the first that fails. The time
    bound starts when the grammar's compile does: waiting behind other compiles does not count against it."""
    for param, grammar in grammars:
        if grammar in _slow:
            raise _too_slow(param, timeout_s)
        result = await _compile(grammar, param, timeout_s)
        if isinstance(result, str):
            raise InvalidParam(f"The grammar does not compile: {result}", param=param, code="invalid_value")


async def _compile(grammar: Grammar, param: str, timeout_s: float) -> object:
    loop = asyncio.get_running_loop()
    started: asyncio.Future[None] = loop.create_future()

    def work() -> object:
        loop.call_soon_threadsafe(_settle, started)
        return compile_grammar(grammar)

    done = asyncio.wrap_future(_pool.submit(work))
    try:
        await asyncio.wait_for(asyncio.shield(started), QUEUE_TIMEOUT_S)
    except TimeoutError:
        raise ServerBusy("Too many grammars are compiling; try again.") from None
    try:
        return await asyncio.wait_for(asyncio.shield(done), timeout_s)
    except TimeoutError:
        _slow[grammar] = None
        while len(_slow) > SLOW_REMEMBERED:
            _slow.popitem(last=False)
        raise _too_slow(param, timeout_s) from None


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _too_slow(param: str, timeout_s: float) -> InvalidParam:
    return InvalidParam(
        f"The grammar did not compile within {timeout_s:g} s; simplify it.", param=param, code="invalid_value"
    )
