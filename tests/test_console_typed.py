"""The console and the typed client tools (shell, apply_patch, local_shell, computer; protocol.md §1.11): the
playground declares them, shows hotloop-sim's calls readably and answers them with what the user types; the live
view's lanes say which calls a response awaits, never what they run. In a headless Chromium (cdp.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdp import Browser, ensure_chromium
from conftest import RunningServer, start_server

# hotloop-sim's first call in a conversation (hotloop/tools/shell.py's `shell_command(1)`)
COMMAND = "printf 'hotloop-sim-%d\\n' 1 | tee hotloop_sim_1.txt"
STATUS = "document.getElementById('pg-status').textContent"
LOG = "document.getElementById('pg-log')"


@pytest.fixture(scope="module")
def hotloop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # one call in a conversation, then text: a call answered once gets the final answer
    running = start_server(tmp_path_factory.mktemp("console-typed"), models=["hotloop-sim"], sim_tool_calls=1)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    ensure_chromium()
    chromium = Browser(tmp_path_factory.mktemp("chromium"))
    yield chromium
    chromium.close()


def new_chat(browser: Browser, *tools: str) -> None:
    """A fresh chain with only `tools` ticked among the client tools."""
    browser.evaluate("document.getElementById('pg-new').click()")
    browser.evaluate(
        f"document.querySelectorAll('#pg-tools input').forEach((box) => {{ box.checked = {json.dumps(tools)}"
        ".includes(box.value); })"
    )


def say(browser: Browser, text: str) -> None:
    browser.evaluate(f"document.getElementById('pg-input').value = {json.dumps(text)}")
    browser.evaluate("document.getElementById('pg-form').requestSubmit()")


def answer(browser: Browser, fields: dict[str, str]) -> None:
    """Fill the latest call's answer form (`selector: value`) and send it."""
    form = f"[...{LOG}.querySelectorAll('.call')].pop().querySelector('form.answer')"
    browser.wait_for(f"{form} !== null")
    for selector, value in fields.items():
        browser.evaluate(f"{form}.querySelector({json.dumps(selector)}).value = {json.dumps(value)}")
    browser.evaluate(f"{form}.requestSubmit()")


def finished_with_text(browser: Browser) -> str:
    """The answer the model gave once its call was answered: the chain's last response, completed, with text."""
    browser.wait_for(f"{STATUS}.startsWith('completed') && !{STATUS}.includes('for the client')")
    text: str = browser.evaluate(f"[...{LOG}.querySelectorAll('.assistant')].pop().textContent")
    return text


def test_the_playground_shows_a_shell_call_and_answers_it(
    browser: Browser, hotloop: RunningServer, tmp_path: Path
) -> None:
    browser.goto(f"http://127.0.0.1:{hotloop.port}/")
    browser.wait_for("document.getElementById('status').textContent.startsWith('live')")
    new_chat(browser, "shell")
    say(browser, "List the files, please")
    browser.wait_for(f"{STATUS}.includes('1 call for the client')")
    call = f"{LOG}.querySelector('.call')"
    assert browser.evaluate(f"{call}.querySelector('.head').textContent") == "→ shell"
    # the command line, as the shell_call_command events streamed it and the finished item holds it
    assert browser.evaluate(f"[...{call}.querySelectorAll('.commands > div')].map((row) => row.textContent)") == [
        f"$ {COMMAND}"
    ]
    call_id = browser.evaluate(f"{call}.dataset.callId")
    assert call_id.startswith("call_")

    # the live view: the playground's lane awaits a shell call; the state carries its type, never the command
    response_id = browser.evaluate(f"{STATUS}.split(' · ')[1]")
    rows = "document.querySelector('#connections tbody').textContent"
    browser.wait_for(f"{rows}.includes('{response_id[:14]}… · 2 · awaits shell_call')")
    with hotloop.http() as http:
        state = http.get("/console/state").text
    assert "hotloop_sim_1.txt" not in state and "hotloop-sim-%d" not in state

    shot = tmp_path / "console-typed.png"
    browser.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    answer(browser, {"textarea": "hotloop-sim-1\n", ".exit input": "0"})
    assert len(finished_with_text(browser)) > 10
    assert browser.evaluate(f"{call}.querySelector('.answered').textContent") == "↩ hotloop-sim-1 (exit 0)"
    browser.wait_for(f"!{rows}.includes('awaits')")  # answered: the lane's latest response awaits nothing

    # what the page sent: a shell_call_output with the typed text as stdout, paired with the call
    final_id = browser.evaluate(f"{STATUS}.split(' · ')[1]")
    with hotloop.http() as http:
        items = http.get(f"/responses/{final_id}/input_items").json()["data"]
    outputs = [item for item in items if item["type"] == "shell_call_output"]
    assert len(outputs) == 1 and outputs[0]["call_id"] == call_id
    assert outputs[0]["output"] == [
        {"stdout": "hotloop-sim-1\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
    ]


def _turn(browser: Browser, tool: str) -> str:
    new_chat(browser, tool)
    say(browser, f"Use {tool}")
    browser.wait_for(f"{STATUS}.includes('1 call for the client')")
    head: str = browser.evaluate(f"{LOG}.querySelector('.call .head').textContent")
    return head


def test_apply_patch_local_shell_and_computer_calls_read_well_and_can_be_answered(
    browser: Browser, hotloop: RunningServer
) -> None:
    browser.goto(f"http://127.0.0.1:{hotloop.port}/")
    call = f"{LOG}.querySelector('.call')"

    assert _turn(browser, "apply_patch") == "→ apply_patch create_file hotloop_sim_1.txt"
    assert browser.evaluate(f"{call}.querySelector('.diff .add').textContent") == "+hotloop-sim-1"
    answer(browser, {"select": "failed", "textarea": "disk full"})
    assert len(finished_with_text(browser)) > 10
    assert browser.evaluate(f"{call}.querySelector('.answered').textContent") == "↩ failed: disk full"

    assert _turn(browser, "local_shell") == "→ local_shell"
    command = browser.evaluate(f"{call}.querySelector('.commands').textContent")
    assert command == "$ sh -c 'printf '\\''hotloop-sim-%d\\n'\\'' 1 | tee hotloop_sim_1.txt'"  # the argv, quoted
    answer(browser, {"textarea": "hotloop-sim-1"})
    assert len(finished_with_text(browser)) > 10

    assert _turn(browser, "computer").startswith("→ computer ")
    answer(browser, {})  # no image URL: a blank screenshot
    assert len(finished_with_text(browser)) > 10
    assert browser.evaluate(f"{call}.querySelector('.answered').textContent") == "↩ screenshot (a blank 1\u00d71 PNG)"

    # hotloop-sim's even-numbered computer calls click; a batch of `actions` gets a line each
    click = {
        "type": "computer_call",
        "call_id": "call_1",
        "action": {"type": "click", "x": 120, "y": 340, "button": "left"},
    }
    batch = {
        "type": "computer_call",
        "call_id": "call_2",
        "actions": [{"type": "type", "text": "hi"}, {"type": "keypress", "keys": ["ENTER"]}],
    }
    shown = (
        "(item) => { const block = document.createElement('div'); fillCall(block, item);"
        " return [...block.querySelectorAll('.head, .code > div')].map((line) => line.textContent); }"
    )
    assert browser.evaluate(f"({shown})({json.dumps(click)})") == ["→ computer click (120, 340) button=left"]
    assert browser.evaluate(f"({shown})({json.dumps(batch)})") == [
        "→ computer 2 actions",
        "type text=hi",
        'keypress keys=["ENTER"]',
    ]


def test_a_message_instead_of_an_answer_leaves_the_call_unanswered(browser: Browser, hotloop: RunningServer) -> None:
    browser.goto(f"http://127.0.0.1:{hotloop.port}/")
    _turn(browser, "shell")
    say(browser, "Never mind")
    browser.wait_for(f"{STATUS}.startsWith('completed') && !{STATUS}.includes('for the client')")
    assert browser.evaluate(f"{LOG}.querySelector('.call .answered').textContent") == "(not answered)"
    assert browser.evaluate(f"{LOG}.querySelectorAll('form.answer').length") == 0
