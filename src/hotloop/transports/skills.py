"""HTTP endpoints of the Skills API: thin handlers over pipeline/objects/skills.py. A skill (or a version of it)
comes as a multipart upload of `files` (transports/uploads.py: at most bundle.MAX_FILES parts, cut off with 413 past
bundle.MAX_ZIP_BYTES); openai-python names the parts `files[]` when it sends a list, `files` for one file. The
update's JSON body is decoded once into its wire Struct (unknown fields refused with a 400 naming them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import msgspec
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hotloop.errors import InvalidParam, MissingParam
from hotloop.pipeline.objects import skills as api
from hotloop.skills import bundle
from hotloop.transports.downloads import download
from hotloop.transports.http import http_session, raw_json, read_body
from hotloop.transports.paging import page_params
from hotloop.transports.uploads import is_multipart, multipart_form
from hotloop.wire.request import decode_body
from hotloop.wire.skills import LIST_LIMIT_MAX, SkillVersion, UpdateSkill

_encode = msgspec.json.Encoder().encode
_update = msgspec.json.Decoder(UpdateSkill)
_FILES = ("files", "files[]")


def _upload(form: FormData, *, versions: bool) -> api.Upload:
    """The form's `files` parts (and a version create's `default`); any other field is refused by name."""
    upload = api.Upload()
    for key, value in form.multi_items():
        if key in _FILES:
            if not isinstance(value, UploadFile):
                raise InvalidParam("files must be file parts (a filename and its bytes), not text.", param="files")
            upload.parts.append((value.filename or "", value.file))
        elif key == "default" and versions and isinstance(value, str):
            upload.default = value
        else:
            raise InvalidParam(f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter")
    if not upload.parts:
        raise MissingParam(
            "Missing required parameter: 'files' (the skill's files, or one zip of them).", param="files"
        )
    return upload


def _form(request: Request) -> AbstractAsyncContextManager[FormData]:
    if not is_multipart(request):
        raise MissingParam(
            "Upload the skill as multipart/form-data: its files (each named by its path in the skill's folder) or "
            "one zip of the folder, as 'files'.",
            param="files",
        )
    return multipart_form(request, bundle.MAX_ZIP_BYTES, max_files=bundle.MAX_FILES, param="files")


async def create_skill(request: Request) -> Response:
    service, session = http_session(request)
    async with _form(request) as form:
        made = await api.create(service, session.owner, _upload(form, versions=False))
    return raw_json(_encode(made))


async def list_skills(request: Request) -> Response:
    service, session = http_session(request)
    after, limit, order = page_params(request.query_params, max_limit=LIST_LIMIT_MAX)
    return raw_json(_encode(await api.list_skills(service, session.owner, after, limit, order)))


async def get_skill(request: Request) -> Response:
    service, session = http_session(request)
    return raw_json(_encode(await api.get(service, session.owner, request.path_params["skill_id"])))


async def update_skill(request: Request) -> Response:
    service, session = http_session(request)
    body = decode_body(_update, await read_body(request, service.settings.max_body_bytes) or b"{}")
    return raw_json(_encode(await api.update(service, session.owner, request.path_params["skill_id"], body)))


async def delete_skill(request: Request) -> Response:
    service, session = http_session(request)
    return raw_json(_encode(await api.delete(service, session.owner, request.path_params["skill_id"])))


async def skill_content(request: Request) -> Response:
    service, session = http_session(request)
    return _zip(*await api.content(service, session.owner, request.path_params["skill_id"]))


async def create_version(request: Request) -> Response:
    service, session = http_session(request)
    skill_id = request.path_params["skill_id"]
    async with _form(request) as form:
        made = await api.create_version(service, session.owner, skill_id, _upload(form, versions=True))
    return raw_json(_encode(made))


async def list_versions(request: Request) -> Response:
    service, session = http_session(request)
    after, limit, order = page_params(request.query_params, max_limit=LIST_LIMIT_MAX)
    listed = await api.list_versions(service, session.owner, request.path_params["skill_id"], after, limit, order)
    return raw_json(_encode(listed))


async def get_version(request: Request) -> Response:
    service, session = http_session(request)
    path = request.path_params
    return raw_json(_encode(await api.get_version(service, session.owner, path["skill_id"], path["version"])))


async def delete_version(request: Request) -> Response:
    service, session = http_session(request)
    path = request.path_params
    return raw_json(_encode(await api.delete_version(service, session.owner, path["skill_id"], path["version"])))


async def version_content(request: Request) -> Response:
    service, session = http_session(request)
    path = request.path_params
    return _zip(*await api.version_content(service, session.owner, path["skill_id"], path["version"]))


def _zip(version: SkillVersion, size: int, chunks: AsyncIterator[bytes]) -> Response:
    return download(chunks, size, f"{version.name}-{version.version}.zip", "application/zip")


def skill_routes() -> list[Route]:
    base = "/v1/skills"
    one = base + "/{skill_id}"
    version = one + "/versions/{version}"
    return [
        Route(base, create_skill, methods=["POST"]),
        Route(base, list_skills, methods=["GET"]),
        Route(one, get_skill, methods=["GET"]),
        Route(one, update_skill, methods=["POST"]),
        Route(one, delete_skill, methods=["DELETE"]),
        Route(one + "/content", skill_content, methods=["GET"]),
        Route(one + "/versions", create_version, methods=["POST"]),
        Route(one + "/versions", list_versions, methods=["GET"]),
        Route(version, get_version, methods=["GET"]),
        Route(version, delete_version, methods=["DELETE"]),
        Route(version + "/content", version_content, methods=["GET"]),
    ]
