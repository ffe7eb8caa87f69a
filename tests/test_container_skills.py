"""Skills in a container (docs/skills.md; skills/requested.py, pipeline/containers/skills.py and staged.py): a hosted
shell's `container_auto` skills and a Containers API container's, inline or from the Skills API, each mounted
read-only at /mnt/skills/<name> and listed in the shell's description.

The first tests are pure (the fast tier): the shapes at the door, the description, resolving against a Skills API
stand-in. The rest start a server whose containers run under bubblewrap (as root), driven by openai-python
unmodified; hotloop-sim runs `metadata["sim_commands"]` in the hosted shell and `metadata["sim_code"]` in the
interpreter.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from conftest import RunningServer, start_server
from hotloop.errors import HotloopError, InvalidParam, NotFound
from hotloop.pipeline.containers.skills import described, resolve
from hotloop.pipeline.tools import resolve_tools
from hotloop.skills.requested import MAX_SKILLS, Inline, Reference, requested
from hotloop.stores.containers import ContainerSkill
from hotloop.tools import hosted_shell
from sandbox_support import ensure_sandbox

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["key-a", "key-b"]
MANIFEST = "---\nname: csv-tool\ndescription: Sums a CSV column.\n---\nRun scripts/total.py FILE COLUMN.\n"
SCRIPT = "import csv, sys\nprint(sum(float(row[sys.argv[2]]) for row in csv.DictReader(open(sys.argv[1]))))\n"


def _zip(files: dict[str, str | bytes], *, link: str | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        if link is not None:  # a member whose mode says symlink, pointing out of the folder
            info = zipfile.ZipInfo(link)
            info.external_attr = 0o120777 << 16
            archive.writestr(info, "/etc/shadow")
    return out.getvalue()


CSV_ZIP = _zip({"csv-tool/SKILL.md": MANIFEST, "csv-tool/scripts/total.py": SCRIPT})


def _inline(name: str = "csv-tool", data: bytes = CSV_ZIP, description: str = "Sums a CSV column.") -> dict[str, Any]:
    source = {"type": "base64", "media_type": "application/zip", "data": base64.b64encode(data).decode()}
    return {"type": "inline", "name": name, "description": description, "source": source}


def _shell(*skills: dict[str, Any]) -> dict[str, Any]:
    return {"type": "shell", "environment": {"type": "container_auto", "skills": list(skills)}}


# -- pure: at the door ---------------------------------------------------------------------------------------------


@pytest.mark.fast
def test_skills_are_read_for_shape_at_the_door() -> None:
    found = requested(
        [
            {"type": "skill_reference", "skill_id": "skill_1"},
            {"type": "skill_reference", "skill_id": "s", "version": 2},
            {"type": "skill_reference", "skill_id": "s", "version": "latest"},
            _inline(),
        ],
        "skills",
    )
    assert found[:3] == (
        Reference("skills[0]", "skill_1", None),
        Reference("skills[1]", "s", "2"),
        Reference("skills[2]", "s", "latest"),
    )
    assert isinstance(found[3], Inline) and found[3].name == "csv-tool" and found[3].param == "skills[3]"
    assert requested(None, "skills") == () == requested([], "skills")


BAD = [
    ({"type": "skill_reference", "skill_id": "s", "version": "0"}, "skills[0].version"),
    ({"type": "skill_reference", "skill_id": "s", "version": "v1"}, "skills[0].version"),
    ({"type": "skill_reference", "skill_id": ""}, "skills[0].skill_id"),
    ({"type": "skill_reference", "skill_id": "s", "path": "/x"}, "skills[0].path"),
    ({**_inline(), "name": "../etc"}, "skills[0].name"),
    ({**_inline(), "name": "CSV"}, "skills[0].name"),
    ({**_inline(), "description": ""}, "skills[0].description"),
    ({**_inline(), "source": {"type": "url", "media_type": "application/zip", "data": "x"}}, "skills[0].source.type"),
    (
        {**_inline(), "source": {"type": "base64", "media_type": "text/plain", "data": "x"}},
        "skills[0].source.media_type",
    ),
    ({**_inline(), "source": {"type": "base64", "media_type": "application/zip"}}, "skills[0].source.data"),
    ({"type": "local", "name": "x", "description": "y", "path": "/x"}, "skills[0].type"),
    ("skill_1", "skills[0]"),
]


@pytest.mark.fast
@pytest.mark.parametrize(("skill", "param"), BAD)
def test_a_bad_skill_is_a_400_naming_its_field(skill: Any, param: str) -> None:
    with pytest.raises(InvalidParam) as refused:
        requested([skill], "skills")
    assert refused.value.param == param


@pytest.mark.fast
def test_a_container_takes_so_many_skills() -> None:
    with pytest.raises(InvalidParam) as refused:
        requested([_inline()] * (MAX_SKILLS + 1), "tools[0].environment.skills")
    assert refused.value.param == "tools[0].environment.skills"


class _Version:
    def __init__(self, skill_id: str, version: str, name: str) -> None:
        self.skill_id, self.version, self.name, self.description = skill_id, version, name, f"The {name} skill."


class _SkillsApi:
    """The Skills API as the runtime sees it: one skill of owner-a's, at version 3."""

    async def bundle(self, owner: str, skill_id: str, version: str | None, param: str) -> tuple[Any, bytes]:
        if owner != "owner-a" or skill_id != "skill_1":
            raise NotFound(f"No skill found with id '{skill_id}'.", param=param, code="skill_not_found")
        return _Version(skill_id, version or "3", "reporter"), _zip({"reporter/SKILL.md": "x"})

    async def sized(self, owner: str, skill_id: str, version: str | None, param: str) -> tuple[Any, int]:
        found, archive = await self.bundle(owner, skill_id, version, param)
        return found, len(archive)


@pytest.mark.fast
def test_the_shell_lists_its_skills_and_a_bad_one_is_refused_before_anything_is_made() -> None:
    tools = resolve_tools([_shell({"type": "skill_reference", "skill_id": "skill_1"}, _inline())])
    shown = asyncio.run(described(tools, _SkillsApi(), None, "owner-a"))
    [spec] = shown.specs
    assert "- reporter: The reporter skill. (/mnt/skills/reporter/SKILL.md)" in (spec.description or "")
    assert "- csv-tool: Sums a CSV column. (/mnt/skills/csv-tool/SKILL.md)" in (spec.description or "")
    assert asyncio.run(described(resolve_tools([_shell()]), _SkillsApi(), None, "owner-a")).specs[0].description == (
        hosted_shell.DESCRIPTION
    )
    refusals = [
        (
            [{"type": "skill_reference", "skill_id": "skill_1"}],
            "owner-b",
            404,
            "tools[0].environment.skills[0].skill_id",
        ),
        ([_inline(), _inline()], "owner-a", 400, "tools[0].environment.skills[1]"),
        ([_inline(name="reporter"), {"type": "skill_reference", "skill_id": "skill_1"}], "owner-a", 400, None),
        ([_inline(data=b"not a zip")], "owner-a", 400, "tools[0].environment.skills[0].source.data"),
        (
            [_inline(data=_zip({"csv-tool/README.md": "x"}))],
            "owner-a",
            400,
            "tools[0].environment.skills[0].source.data",
        ),
        (
            [_inline(data=_zip({"a/SKILL.md": "x", "b/x": "y"}))],
            "owner-a",
            400,
            "tools[0].environment.skills[0].source.data",
        ),
        ([_inline(data=_zip({"csv-tool/SKILL.md": "x"}, link="csv-tool/l"))], "owner-a", 400, None),
    ]
    for skills, owner, status, param in refusals:
        with pytest.raises(HotloopError) as refused:
            asyncio.run(described(resolve_tools([_shell(*skills)]), _SkillsApi(), None, owner))
        assert refused.value.status == status
        assert param is None or refused.value.param == param, refused.value.param
    bad_base64 = {**_inline(), "source": {"type": "base64", "media_type": "application/zip", "data": "@@@"}}
    with pytest.raises(InvalidParam) as refused:
        asyncio.run(resolve(_SkillsApi(), "owner-a", requested([bad_base64], "skills")))
    assert refused.value.param == "skills[0].source.data"


class _Containers:
    async def listed_skills(self, owner: str, container_id: str) -> list[ContainerSkill]:
        return [ContainerSkill("csv-tool", "Sums a CSV column.", 9)] if owner == "owner-a" else []


@pytest.mark.fast
def test_a_referenced_container_s_skills_are_listed_as_it_was_made() -> None:
    tools = resolve_tools([{"type": "shell", "environment": {"type": "container_reference", "container_id": "cntr_1"}}])
    shown = asyncio.run(described(tools, _SkillsApi(), _Containers(), "owner-a"))  # type: ignore[arg-type]
    assert "- csv-tool: Sums a CSV column. (/mnt/skills/csv-tool/SKILL.md)" in (shown.specs[0].description or "")
    unseen = asyncio.run(described(tools, _SkillsApi(), _Containers(), "owner-b"))  # type: ignore[arg-type]
    assert unseen.specs[0].description == hosted_shell.DESCRIPTION


# -- a server whose containers have skills -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    ensure_sandbox()
    running = start_server(tmp_path_factory.mktemp("skills"), api_keys=KEYS, models=["hotloop-sim"])
    yield running
    running.stop()


def _run(client: openai.OpenAI, tools: list[dict[str, Any]], *commands: str) -> list[Any]:
    """One hosted shell call of these commands: each command's output."""
    response = client.responses.create(
        model="hotloop-sim", input="run", tools=tools, metadata={"sim_commands": json.dumps(list(commands))}
    )
    answer = response.output[1]
    assert answer.type == "shell_call_output", response.output
    return list(answer.output)


def _staged(pid_folders: Path = Path("/run/hotloop-sandbox/skills")) -> list[Path]:
    """The skill folders every worker has unpacked."""
    return [entry for folder in pid_folders.iterdir() for entry in folder.iterdir()] if pid_folders.exists() else []


def test_an_inline_skill_is_a_read_only_folder_its_scripts_run_from(served: RunningServer) -> None:
    client = served.client(api_key="key-a")
    outputs = _run(
        client,
        [_shell(_inline())],
        "cat /mnt/skills/csv-tool/SKILL.md",
        "printf 'k,v\\na,1.5\\nb,2\\n' > t.csv && python3 /mnt/skills/csv-tool/scripts/total.py t.csv v",
        "touch /mnt/skills/csv-tool/x || echo refused",
        "ls -ld /mnt/skills/csv-tool/scripts/total.py",
    )
    assert outputs[0].stdout == MANIFEST
    assert outputs[1].stdout.strip() == "3.5"
    assert "Read-only file system" in outputs[2].stderr and outputs[2].stdout.strip() == "refused"
    assert outputs[3].stdout.startswith("-rw-r--r--")
    # Another container with the same skill shares its folder: one unpacking per zip, not per container.
    staged = _staged()
    assert _run(client, [_shell(_inline())], "cat /mnt/skills/csv-tool/SKILL.md")[0].stdout == MANIFEST
    assert _staged() == staged


def test_a_skills_api_skill_is_mounted_at_the_version_asked_for(served: RunningServer) -> None:
    client = served.client(api_key="key-a")
    skill = client.skills.create(files=("csv-tool.zip", CSV_ZIP, "application/zip"))
    newer = MANIFEST.replace("Sums a CSV column.", "Sums a CSV column, v2.")
    client.skills.versions.create(skill.id, files=("v2.zip", _zip({"csv-tool/SKILL.md": newer}), "application/zip"))
    first = {"type": "skill_reference", "skill_id": skill.id, "version": "1"}
    latest = {"type": "skill_reference", "skill_id": skill.id, "version": "latest"}
    assert _run(client, [_shell(first)], "cat /mnt/skills/csv-tool/SKILL.md")[0].stdout == MANIFEST
    assert _run(client, [_shell(latest)], "cat /mnt/skills/csv-tool/SKILL.md")[0].stdout == newer
    # Another key's skill is not there: a 404 naming it, and no container made for the request.
    other = served.client(api_key="key-b")
    before = len(other.containers.list().data)
    with pytest.raises(openai.NotFoundError) as missing:
        _run(other, [_shell(first)], "true")
    assert missing.value.body["param"] == "tools[0].environment.skills[0].skill_id"  # type: ignore[index]
    assert len(other.containers.list().data) == before


def test_a_container_made_with_skills_has_them_for_code_and_lists_none_as_files(served: RunningServer) -> None:
    client = served.client(api_key="key-a")
    own = _inline(data=_zip({"csv-tool/SKILL.md": MANIFEST + "Its own copy.\n"}))  # a zip no other container has
    container = client.containers.create(name="with-skills", extra_body={"skills": [own]})
    staged = len(_staged())
    response = client.responses.create(
        model="hotloop-sim",
        input="run",
        tools=[{"type": "code_interpreter", "container": container.id}],
        include=["code_interpreter_call.outputs"],
        metadata={"sim_code": "print(open('/mnt/skills/csv-tool/SKILL.md').read().splitlines()[1])"},
    )
    [call] = [item for item in response.output if item.type == "code_interpreter_call"]
    assert call.status == "completed" and call.outputs and "name: csv-tool" in call.outputs[0].logs  # type: ignore[union-attr]
    assert client.containers.files.list(container.id).data == []  # skills are not its files
    assert len(_staged()) == staged + 1
    client.containers.delete(container.id)
    for _ in range(100):  # the replica hears of the deletion and closes the live container, its skill folder too
        if len(_staged()) == staged:
            break
        asyncio.run(asyncio.sleep(0.05))
    assert len(_staged()) == staged
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.create(name="bad", extra_body={"skills": [_inline(data=b"PK not a zip")]})
    assert refused.value.body["param"] == "skills[0].source.data"  # type: ignore[index]
