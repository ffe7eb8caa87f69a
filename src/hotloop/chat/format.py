"""A model's chat format: its Jinja chat template and tokenizer, rendered into text and token ids, and what the
incremental renderer (chat/incremental.py) learns about it once: whether it renders message by message, and the
text each role's message is wrapped in when the template only concatenates `content`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import jinja2
import jinja2.sandbox

from hotloop.chat.specs import Tokenizer

Chat = dict[str, str]  # one template message: {"role", "content"}


class ChatFormat:
    """A chat template (Jinja, as shipped in the model's GGUF) plus the tokenizer that goes with it."""

    def __init__(
        self,
        template: str,
        tokenizer: Tokenizer,
        bos_token: str = "",
        eos_token: str = "",
        boundaries: Sequence[str] = (),
    ) -> None:
        """`boundaries`: further special tokens a message starts with (harmony's `<|start|>`)."""
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._template = env.from_string(template)
        self.tokenizer = tokenizer
        self._special = {"bos_token": bos_token, "eos_token": eos_token}
        # Incremental rendering (chat/incremental.py): special tokens a message segment may start with, the
        # generation prompt's ids, a salt for cache keys, and whether the probe found the template per-message.
        # The end-of-turn token an engine generates last (it stays in the engine's cache before the next message).
        self.eos_ids = tokenizer.encode(eos_token) if eos_token else []
        self.boundary_ids = frozenset(
            ids[0] for ids in (tokenizer.encode(t) for t in (bos_token, eos_token, *boundaries) if t) if len(ids) == 1
        )
        probe = [{"role": "user", "content": "probe"}]
        with_prompt = self.render_text(probe, add_generation_prompt=True)
        without = self.render_text(probe, add_generation_prompt=False)
        self.generation_ids = tokenizer.encode(with_prompt[len(without) :]) if with_prompt.startswith(without) else []
        self.cache_salt = hashlib.blake2b(template.encode(), digest_size=16).digest()
        self.incremental = False
        self._source = template
        # role → (text before, text after) a message's content, where the template provably renders a message
        # after the first as that plain concatenation (`learn_wrappers`); segments then skip Jinja.
        self.wrappers: dict[str, tuple[str, str]] = {}

    @property
    def template(self) -> str:
        return self._source

    @property
    def special_tokens(self) -> dict[str, str]:
        """`bos_token` and `eos_token`, as the template reads them."""
        return dict(self._special)

    def render_text(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        try:
            return self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt, **self._special
            )
        except jinja2.TemplateError as exc:
            raise RuntimeError(f"chat template failed: {exc}") from exc

    def tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        return self.tokenizer.encode(self.render_text(messages, add_generation_prompt))

    def segment_text(self, base: Chat, base_text: str, messages: Sequence[Chat]) -> str | None:
        """The text `messages` add after the conversation's first message `base` (rendered alone as `base_text`),
        or None when the template does not render them as a suffix of it."""
        wrappers = self.wrappers
        if wrappers and all(message["role"] in wrappers for message in messages):
            parts: list[str] = []
            for message in messages:
                before, after = wrappers[message["role"]]
                parts += (before, message["content"], after)
            return "".join(parts)
        text = self.render_text([base, *messages], add_generation_prompt=False)
        return text[len(base_text) :] if text.startswith(base_text) else None

    def learn_wrappers(self) -> dict[str, tuple[str, str]]:
        """Find, per role, the text the template puts around a later message's content, where that is provably all
        it does: the template uses `content` only inside string concatenation that it outputs (read from its
        syntax tree), and renders every probe below as exactly that concatenation. Otherwise segments keep
        rendering through Jinja. Called once, by the incremental probe (chat/incremental.py)."""
        self.wrappers = {}
        if not _content_only_output(self._source):
            return self.wrappers
        learned: dict[str, tuple[str, str]] = {}
        for role in ("system", "user", "assistant", "tool"):
            wrapper = self._wrapper(role)
            if wrapper is not None:
                learned[role] = wrapper
        if learned and self._wrappers_hold(learned):
            self.wrappers = learned
        return self.wrappers

    def _wrapper(self, role: str) -> tuple[str, str] | None:
        found: set[tuple[str, str]] = set()
        for base in _PROBE_BASES:
            base_text = self.render_text([base], add_generation_prompt=False)
            try:
                text = self.render_text([base, {"role": role, "content": _SENTINEL}], add_generation_prompt=False)
            except RuntimeError:  # the template refuses this role here
                return None
            if not text.startswith(base_text) or text.count(_SENTINEL) != 1:
                return None
            before, _, after = text[len(base_text) :].partition(_SENTINEL)
            found.add((before, after))
        return found.pop() if len(found) == 1 else None

    def _wrappers_hold(self, learned: dict[str, tuple[str, str]]) -> bool:
        roles = list(learned)
        for base in _PROBE_BASES:
            base_text = self.render_text([base], add_generation_prompt=False)
            for contents in _PROBE_CONTENTS:
                messages = [{"role": roles[i % len(roles)], "content": c} for i, c in enumerate(contents)]
                rendered = self.render_text([base, *messages], add_generation_prompt=False)
                expected = "".join(learned[m["role"]][0] + m["content"] + learned[m["role"]][1] for m in messages)
                if rendered != base_text + expected:
                    return False
        return True


_SENTINEL = "\x00hotloop-content\x00"
_PROBE_BASES = [{"role": "system", "content": "You are a probe."}, {"role": "user", "content": "Hi there"}]
_PROBE_CONTENTS = [
    ["", "  padded \n", "x"],
    ["line one\nline two", '<tool_call>\n{"name": "f"}\n</tool_call>', "  ", "ünï 日本 😀", "{{ '%s' }}"],
]
_VERBATIM = (jinja2.nodes.Add, jinja2.nodes.Concat)


def _content_only_output(source: str) -> bool:
    """Whether every use of a message's `content` in the template is output as is, joined only by `+` or `~`."""
    try:
        tree = jinja2.Environment().parse(source)
    except jinja2.TemplateSyntaxError:
        return False
    return _uses_ok(tree, [])


def _uses_ok(node: jinja2.nodes.Node, parents: list[jinja2.nodes.Node]) -> bool:
    if _is_content(node):
        for parent in reversed(parents):
            if isinstance(parent, jinja2.nodes.Output):
                return True
            if not isinstance(parent, _VERBATIM):
                return False
        return False
    trail = [*parents, node]
    return all(_uses_ok(child, trail) for child in node.iter_child_nodes())


def _is_content(node: jinja2.nodes.Node) -> bool:
    if isinstance(node, jinja2.nodes.Getattr):
        return node.attr == "content"
    if isinstance(node, jinja2.nodes.Getitem):
        return isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == "content"
    return isinstance(node, jinja2.nodes.Name) and node.name == "content"
