"""Issue 34, finding 10: what the console and the CLI show of a refused request reads as a
sentence: the field as a form names it, what is allowed in words, no field path, no API path,
no backticks; the answer's ``code`` and ``field`` stay for programs."""

from __future__ import annotations

import re

import pytest
from httpx import AsyncClient as Client

from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services.sessions.commit import commit_reference
from tests.manager.conftest import UserFactory

API_SPEAK = re.compile(
    r"`|/api/v1|resources\.|should have|Input should|Field required|Value error"
)


def words(answer: dict[str, object]) -> str:
    message = str(answer["message"])
    assert not API_SPEAK.search(message), message
    return message


@pytest.mark.parametrize(("body", "field", "message"), [
    ({"resources": {"mem": "lots"}}, "resources.mem",
     "Memory: 'lots' is not a size; write e.g. 512m, 2g or 1.5g (a plain number counts bytes)"),
    ({"resources": {"cpu": "abc"}}, "resources.cpu", "CPU: 'abc' is not a number; expected a "
     "number of CPU cores such as 0.5, 1 or 4"),
    ({"resources": {"gpu": 1, "gpu_mem": "1g"}}, "resources",
     "Ask for a GPU share (fGPU) or GPU memory, not both"),
    ({"count": 0}, "count", "Number of sessions: must be 1 or more"),
    ({"image": ""}, "image", "Image: use at least 1 character"),
    ({"type": "daemon"}, "type", "Type: choose 'interactive' or 'batch'"),
])
async def test_a_bad_launch_is_told_in_words(
    admin: Client, body: dict[str, object], field: str, message: str
) -> None:
    r = await admin.post("/api/v1/sessions", json={"image": "python:3.11", **body})
    answer = r.json()
    assert (r.status_code, answer["code"], answer["field"]) == (422, "validation_error", field)
    assert words(answer) == message


async def test_a_short_password_and_a_bad_folder_name_are_told_in_words(
    make_user: UserFactory,
) -> None:
    carol = await make_user("carol")
    short = await carol.post("/api/v1/auth/password", json={
        "current_password": "password-carol", "new_password": "short"})
    assert (short.status_code, short.json()["field"]) == (422, "new_password")
    assert words(short.json()) == "New password: use at least 8 characters"
    folder = await carol.post("/api/v1/folders", json={"name": "bad/name"})
    assert (folder.status_code, folder.json()["field"]) == (422, "name")
    assert words(folder.json()).startswith("Folder name 'bad/name': use 1-64 letters")


async def test_an_unknown_image_says_where_to_look_not_an_api_path(admin: Client) -> None:
    r = await admin.post("/api/v1/sessions", json={"image": "nosuch:1"})
    answer = r.json()
    assert (r.status_code, answer["code"], answer["field"]) == (404, "unknown_image", "image")
    assert "the launch dialog and \"gpuslice image list\" show the ones you can use" in words(
        answer)


async def test_a_bad_image_name_is_told_in_words(admin: Client) -> None:
    spaced = (await admin.post("/api/v1/images", json={"name": "my env"})).json()
    assert words(spaced) == "Name: write it without spaces"
    r = await admin.post("/api/v1/images", json={"name": "BadName!"})
    answer = r.json()
    assert (r.status_code, answer["field"]) == (422, "name")
    assert words(answer).startswith("'BadName!' is not an image name: write lower-case "
                                    "letters and digits"), answer
    assert "[registry" not in answer["message"]


def test_a_bad_commit_name_is_told_of_what_was_typed() -> None:
    with pytest.raises(InvalidRequest) as refused:
        commit_reference("Bad Name!", "work", "alice")
    assert refused.value.message.startswith(
        "image name 'Bad Name!': write lower-case letters and digits joined by . _ or -")
    assert "u/alice" not in refused.value.message
