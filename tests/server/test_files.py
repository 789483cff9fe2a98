"""File parts: inbound bytes and URLs (downloads from a real local server through the
guarded client) saved to the inbox under safe names; outbound files as artifact parts."""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_gateway.local.files import MAX_NAME_BYTES, sanitize_filename
from a2a_gateway.protocol import proto_dict
from a2a_gateway.protocol.context import ANONYMOUS, Caller
from a2a_gateway.server.files import (
    FileRefused,
    OutgoingFile,
    SavedFile,
    demo_file,
    files_artifact,
    inbox_folder,
    outgoing_parts,
    receive_files,
    received_note,
)
from a2a_gateway.server.outbound import OutboundClient
from lf.a2a.v1 import a2a_pb2 as pb

TIMEOUT_S = 5.0
ALICE = Caller(name="alice", workspace="")


def message(*parts: pb.Part) -> pb.Message:
    return pb.Message(message_id="m-1", role=pb.ROLE_USER, parts=list(parts))


async def receive(
    workspace: Path,
    msg: pb.Message,
    *,
    caller: Caller = ALICE,
    client: OutboundClient | None = None,
    max_file_bytes: int = 10 * 1024 * 1024,
    max_files: int = 20,
) -> list[SavedFile]:
    async with asyncio.timeout(TIMEOUT_S):
        return await receive_files(
            msg,
            workspace=workspace,
            caller=caller,
            client=client,
            max_file_bytes=max_file_bytes,
            max_files=max_files,
        )


def inbox_files(workspace: Path) -> list[str]:
    inbox = workspace / "inbox"
    if not inbox.exists():
        return []
    return sorted(str(p.relative_to(workspace)) for p in inbox.rglob("*") if p.is_file())


# --- names -----------------------------------------------------------------------------

HOSTILE = [
    ("../x", "x"),
    ("../../etc/passwd", "passwd"),
    ("..\\..\\windows\\win.ini", "win.ini"),
    ("/absolute/path.txt", "path.txt"),
    ("dir/", "dir"),
    ("a\x00b.txt", "a_b.txt"),
    ("evil.php\x00.txt", "evil.php_.txt"),
    ("tab\tand\nnewline", "tab_and_newline"),
    (".bashrc", "bashrc"),
    ("..", "file"),
    ("...", "file"),
    ("/", "file"),
    ("", "file"),
    ("   ", "file"),
    ("-rf", "rf"),
    ("name. . ", "name"),
    ("CON", "_CON"),
    ("con", "_con"),
    ("nul.txt", "_nul.txt"),
    ("NUL .txt", "_NUL .txt"),
    ("COM1", "_COM1"),
    ("lpt9.log", "_lpt9.log"),
    ("COM¹.txt", "_COM¹.txt"),
    ("console.txt", "console.txt"),
    ('a<b>c:d"e|f?g*h.txt', "a_b_c_d_e_f_g_h.txt"),
    ("invoice\u202etxt.exe", "invoice_txt.exe"),
    ("re\u0301sume\u0301.pdf", "résumé.pdf"),
]


@pytest.mark.parametrize(("hostile", "safe"), HOSTILE)
def test_hostile_names_are_sanitised(hostile: str, safe: str) -> None:
    assert sanitize_filename(hostile) == safe


def test_very_long_names_are_cut_keeping_the_extension() -> None:
    for long_name in ("x" * 1000 + ".pdf", "é" * 300 + ".tar.gz", "y" * 5000):
        cut = sanitize_filename(long_name)
        assert len(cut.encode()) <= MAX_NAME_BYTES
        assert cut.endswith(long_name.rsplit(".", 1)[-1][-10:])
    assert sanitize_filename("z" * 300 + "." + "e" * 40).startswith("zzz")


# --- files in --------------------------------------------------------------------------


async def test_inline_bytes_land_in_the_callers_inbox(tmp_path: Path) -> None:
    data = b"%PDF-1.7 fake"
    saved = await receive(
        tmp_path,
        message(
            pb.Part(text="see attached"),
            pb.Part(raw=data, filename="report.pdf", media_type="application/pdf"),
            pb.Part(raw=b"a,b\n1,2\n", filename="table.csv"),
            pb.Part(raw=b"\x00\x01", media_type="image/png"),
        ),
    )
    assert [f.relative for f in saved] == [
        "inbox/alice/report.pdf",
        "inbox/alice/table.csv",
        "inbox/alice/file.png",
    ]
    assert [f.part_index for f in saved] == [1, 2, 3]
    assert [f.media_type for f in saved] == ["application/pdf", "text/csv", "image/png"]
    first = saved[0]
    assert first.path == (tmp_path / "inbox" / "alice" / "report.pdf").resolve()
    assert first.path.read_bytes() == data and first.size == len(data)
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
    assert inbox_files(tmp_path) == sorted(f.relative for f in saved)  # no temp files left
    note = received_note(saved)
    assert "inbox/alice/report.pdf (application/pdf, 13 bytes)" in note


async def test_a_clash_gets_a_numbered_name(tmp_path: Path) -> None:
    part = pb.Part(raw=b"v", filename="notes.txt")
    names = []
    for _ in range(3):
        (saved,) = await receive(tmp_path, message(part))
        names.append(saved.filename)
    assert names == ["notes.txt", "notes-2.txt", "notes-3.txt"]
    (again,) = await receive(tmp_path, message(pb.Part(raw=b"v", filename="../notes.txt")))
    assert again.filename == "notes-4.txt"
    assert (tmp_path / "inbox" / "alice" / "notes.txt").read_bytes() == b"v"


@pytest.mark.parametrize(("hostile", "safe"), HOSTILE)
async def test_hostile_names_stay_in_the_inbox(tmp_path: Path, hostile: str, safe: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (saved,) = await receive(workspace, message(pb.Part(raw=b"data", filename=hostile)))
    folder = (workspace / "inbox" / "alice").resolve()
    assert saved.path.parent == folder
    assert saved.path.read_bytes() == b"data"
    expected = "file.bin" if hostile == "" else safe  # no name at all: typed by media
    assert saved.filename == expected
    assert sorted(os.listdir(tmp_path)) == ["ws"]


async def test_the_caller_folder_name_is_sanitised_too(tmp_path: Path) -> None:
    evil = Caller(name="../../evil", workspace="")
    (saved,) = await receive(tmp_path, message(pb.Part(raw=b"x", filename="a.txt")), caller=evil)
    assert saved.relative == "inbox/evil/a.txt"
    (anon,) = await receive(
        tmp_path, message(pb.Part(raw=b"x", filename="a.txt")), caller=ANONYMOUS
    )
    assert anon.relative == "inbox/anonymous/a.txt"
    assert inbox_folder(tmp_path, evil) == tmp_path / "inbox" / "evil"


async def test_an_over_size_part_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    msg = message(
        pb.Part(raw=b"small", filename="ok.txt"),
        pb.Part(raw=b"x" * 101, filename="big.bin"),
    )
    with pytest.raises(FileRefused) as refused:
        await receive(tmp_path, msg, max_file_bytes=100)
    assert str(refused.value) == (
        "message.parts[1]: file 'big.bin' is larger than 100 bytes (max_file_bytes)"
    )
    assert inbox_files(tmp_path) == []


async def test_too_many_file_parts_are_refused(tmp_path: Path) -> None:
    msg = message(*[pb.Part(raw=b"x", filename=f"{i}.txt") for i in range(3)])
    with pytest.raises(FileRefused, match="at most 2 file parts"):
        await receive(tmp_path, msg, max_files=2)
    assert inbox_files(tmp_path) == []


async def test_no_file_parts_means_no_inbox(tmp_path: Path) -> None:
    assert await receive(tmp_path, message(pb.Part(text="hi"))) == []
    assert not (tmp_path / "inbox").exists()


async def test_a_symlinked_inbox_is_not_followed(tmp_path: Path) -> None:
    workspace, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    workspace.mkdir()
    elsewhere.mkdir()
    (workspace / "inbox").symlink_to(elsewhere)
    with pytest.raises(FileRefused, match=r"message.parts\[0\]: the file could not be saved"):
        await receive(workspace, message(pb.Part(raw=b"x", filename="a.txt")))
    assert list(elsewhere.iterdir()) == []


# --- files in, by URL --------------------------------------------------------------------


@pytest.fixture
async def file_server() -> AsyncIterator[tuple[str, list[str]]]:
    hits: list[str] = []

    async def report(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=b"col\n1\n", content_type="text/csv")

    async def big(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=b"x" * 5000, content_type="application/octet-stream")

    async def missing(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(status=404)

    async def moved(request: web.Request) -> web.Response:
        hits.append(request.path)
        raise web.HTTPFound("/files/report.csv")

    app = web.Application()
    app.router.add_get("/files/report.csv", report)
    app.router.add_get("/files/big.bin", big)
    app.router.add_get("/files/missing.txt", missing)
    app.router.add_get("/files/moved", moved)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server(access_log=None)
    yield f"http://127.0.0.1:{server.port}", hits
    await server.close()


@pytest.fixture
async def private_client() -> AsyncIterator[OutboundClient]:
    async with OutboundClient(allow_private_urls=True) as client:
        yield client


async def test_a_url_part_is_downloaded_through_the_guarded_client(
    tmp_path: Path, file_server: tuple[str, list[str]], private_client: OutboundClient
) -> None:
    base, hits = file_server
    saved = await receive(
        tmp_path,
        message(
            pb.Part(url=f"{base}/files/report.csv?download=1"),
            pb.Part(url=f"{base}/files/report.csv", filename="renamed.dat"),
        ),
        client=private_client,
    )
    assert [f.relative for f in saved] == ["inbox/alice/report.csv", "inbox/alice/renamed.dat"]
    assert [f.media_type for f in saved] == ["text/csv", "text/csv"]
    assert saved[0].path.read_bytes() == b"col\n1\n"
    assert hits == ["/files/report.csv", "/files/report.csv"]


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/files/big.bin", "message.parts[0]: file 'big.bin' is larger than 1000 bytes"),
        ("/files/missing.txt", "message.parts[0]: could not download the file: "),
        ("/files/moved", "redirects are not followed"),
    ],
)
async def test_undownloadable_urls_fail_clearly(
    tmp_path: Path,
    file_server: tuple[str, list[str]],
    private_client: OutboundClient,
    path: str,
    words: str,
) -> None:
    base, hits = file_server
    msg = message(pb.Part(url=f"{base}{path}", filename=Path(path).name))
    with pytest.raises(FileRefused) as refused:
        await receive(tmp_path, msg, client=private_client, max_file_bytes=1000)
    assert words in str(refused.value)
    if path == "/files/missing.txt":
        assert "HTTP 404" in str(refused.value)
    assert hits == [path]  # one request: no redirect followed
    assert inbox_files(tmp_path) == []


async def test_url_downloads_obey_the_guard(
    tmp_path: Path, file_server: tuple[str, list[str]]
) -> None:
    base, hits = file_server
    async with OutboundClient() as guarded:
        with pytest.raises(FileRefused, match="only https"):
            await receive(
                tmp_path, message(pb.Part(url=f"{base}/files/report.csv")), client=guarded
            )
        with pytest.raises(FileRefused, match="loopback"):
            await receive(
                tmp_path,
                message(pb.Part(url=f"https://127.0.0.1:{base.rsplit(':', 1)[1]}/x")),
                client=guarded,
            )
    with pytest.raises(FileRefused, match="not accepted here"):
        await receive(tmp_path, message(pb.Part(url=f"{base}/files/report.csv")), client=None)
    assert hits == []


async def test_a_later_failure_removes_files_saved_before_it(
    tmp_path: Path, file_server: tuple[str, list[str]], private_client: OutboundClient
) -> None:
    base, _ = file_server
    msg = message(
        pb.Part(raw=b"first", filename="first.txt"),
        pb.Part(url=f"{base}/files/missing.txt"),
    )
    with pytest.raises(FileRefused, match=r"message.parts\[1\]"):
        await receive(tmp_path, msg, client=private_client)
    assert inbox_files(tmp_path) == []


# --- files out -------------------------------------------------------------------------


def test_outgoing_files_become_parts_with_bytes_type_and_name(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "chart.png").write_bytes(b"\x89PNG")
    built = outgoing_parts(
        [
            OutgoingFile("summary.md", data=b"# Summary\n"),
            OutgoingFile("", path=Path("out/chart.png")),
            OutgoingFile("data.bin", data=b"\x00", media_type="application/x-custom"),
        ],
        workspace=tmp_path,
    )
    assert built.note == ""
    assert [(p.filename, p.media_type, p.raw) for p in built.parts] == [
        ("summary.md", "text/markdown", b"# Summary\n"),
        ("chart.png", "image/png", b"\x89PNG"),
        ("data.bin", "application/x-custom", b"\x00"),
    ]
    wire = proto_dict.to_dict(built.parts[1])
    assert wire == {
        "raw": base64.b64encode(b"\x89PNG").decode(),
        "filename": "chart.png",
        "mediaType": "image/png",
    }


def test_outgoing_files_over_the_cap_or_unreadable_are_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("not for callers")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "big.log").write_bytes(b"x" * 11)
    (workspace / "link.txt").symlink_to(outside)
    os.mkfifo(workspace / "pipe")
    built = outgoing_parts(
        [
            OutgoingFile("ok.txt", data=b"fine"),
            OutgoingFile("huge.bin", data=b"x" * 11),
            OutgoingFile("big.log", path=Path("big.log")),
            OutgoingFile("escape.txt", path=Path("../secret.txt")),
            OutgoingFile("link.txt", path=Path("link.txt")),
            OutgoingFile("pipe", path=Path("pipe")),
            OutgoingFile("gone.txt", path=Path("gone.txt")),
            OutgoingFile("empty"),
        ],
        max_file_bytes=10,
        workspace=workspace,
    )
    assert [p.filename for p in built.parts] == ["ok.txt"]
    assert dict(built.skipped) == {
        "huge.bin": "over 10 bytes",
        "big.log": "over 10 bytes",
        "escape.txt": "outside the workspace",
        "link.txt": "outside the workspace",
        "pipe": "not a regular file",
        "gone.txt": "no such file or directory",
        "empty": "no content",
    }
    assert built.note.startswith("Files skipped: huge.bin (over 10 bytes), big.log")


def test_files_artifact_and_the_faux_demo_file() -> None:
    artifact, note = files_artifact([demo_file("hello.txt")])
    assert artifact is not None and note == ""
    assert artifact.name == "files" and not artifact.artifact_id
    (part,) = artifact.parts
    assert (part.filename, part.media_type) == ("hello.txt", "text/plain")
    assert b"Name: hello.txt" in part.raw
    nothing, why = files_artifact([demo_file("big.bin", size=2048)], max_file_bytes=1024)
    assert nothing is None
    assert why == "Files skipped: big.bin (over 1024 bytes)."
    assert len(demo_file("../x.csv", size=5000).data or b"") == 5000
    assert demo_file("../x.csv").filename == "x.csv"
