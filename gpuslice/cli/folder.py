"""`gpuslice folder ...`: storage folders and their files (mounted in sessions at
/home/work/<name>), sharing, usage."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli.output import (
    CliError,
    JsonOpt,
    ago,
    confirm,
    console,
    friendly,
    mem,
    print_json,
    table,
    transfer_bar,
)
from gpuslice.client import ApiError, Client
from gpuslice.common.storage_paths import entry_path, shown

if TYPE_CHECKING:
    from gpuslice.common.schemas.storage import FileEntry, FolderPublic, StorageUsage

app = typer.Typer(help="Storage folders: create, list, upload, download, share, delete.",
                  no_args_is_help=True)
Ref = Annotated[str, typer.Argument(help="Folder name or id.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")]


def _client() -> Client:
    return Client.from_config()


@app.command("create")
@friendly
def create(
    name: Annotated[str, typer.Argument(help="Its name in sessions (/home/work/NAME); a "
                                        "leading dot mounts it in all your sessions.")],
    shared: Annotated[bool, typer.Option("--shared", help="Admins: a shared folder (a "
                                         "dataset) to grant to users.")] = False,
    project: Annotated[str | None, typer.Option(
        help="Admins: a folder of this project, mounted read-write by its members.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a folder."""
    with _client() as client:
        folder = client.create_folder(name, shared, project)
    if as_json:
        print_json(folder)
        return
    where = "every session of yours" if folder.auto_mount else "sessions that ask for it"
    console.print(f"created folder {folder.name} ({folder.id}): mounted at "
                  f"/home/work/{folder.name} in {where}", markup=False)


@app.command("list")
@friendly
def list_(as_json: JsonOpt = False) -> None:
    """Your folders and those shared with you, with their size and your storage use."""
    with _client() as client:
        folders = client.list_folders()
        usage = client.storage_usage()
    if as_json:
        print_json(folders)
        return
    table(["name", "id", "owner", "access", "size", "files", "shared with", "mounted",
           "measured"],
          [(f.name, f.id[:12], f.owner, f.access, mem(f.size), f.files, _grants(f),
            "always" if f.auto_mount else "on request", ago(f.measured_at)) for f in folders])
    console.print(_usage_line(usage), markup=False)


@app.command("usage")
@friendly
def usage(user: Annotated[str | None, typer.Option(help="Admins: another user's.")] = None,
          as_json: JsonOpt = False) -> None:
    """What your own folders hold against your storage quota."""
    with _client() as client:
        got = client.storage_usage(user)
    if as_json:
        print_json(got)
        return
    console.print(_usage_line(got), markup=False)


@app.command("rename")
@friendly
def rename(ref: Ref, name: Annotated[str, typer.Argument(help="The new name.")]) -> None:
    """Rename a folder (sessions started from now on mount it under the new name)."""
    with _client() as client:
        folder = client.rename_folder(ref, name)
    console.print(f"{ref} is now {folder.name}", markup=False)


@app.command("delete")
@friendly
def delete(ref: Ref, yes: YesOpt = False) -> None:
    """Delete a folder and all its files (asks first)."""
    with _client() as client:
        folder = client.find_folder(ref)
        confirm(f"Delete folder {folder.name} and its {folder.files or 0} file(s) "
                f"({mem(folder.size or 0)})?", yes)
        client.delete_folder(folder.id)
    console.print(f"deleted folder {folder.name}", markup=False)


@app.command("share")
@friendly
def share(ref: Ref, user: Annotated[str, typer.Argument(help="A username.")],
          rw: Annotated[bool, typer.Option("--rw", help="Read-write (default: read-only).")]
          = False) -> None:
    """Share a folder with a user, read-only or read-write (dot-folders are never shared).
    The answer is the same whether the user exists: a name nobody has yet is shared with the
    user who gets it."""
    with _client() as client:
        grant = client.share_folder(ref, user, "rw" if rw else "ro")
    console.print(f"{ref} is shared with {grant.username} "
                  f"({'read-write' if rw else 'read-only'})", markup=False)


@app.command("revoke")
@friendly
def revoke(ref: Ref, user: Annotated[str, typer.Argument(help="A username.")]) -> None:
    """Stop sharing a folder with a user."""
    with _client() as client:
        client.revoke_folder(ref, user)
    console.print(f"{ref} is no longer shared with {user}", markup=False)


@app.command("ls")
@friendly
def ls(ref: Ref, path: Annotated[str, typer.Argument(help="A directory in it.")] = "",
       as_json: JsonOpt = False) -> None:
    """The files of a folder (or of one of its directories)."""
    with _client() as client:
        listing = client.list_files(ref, path)
    if as_json:
        print_json(listing)
        return
    table(["name", "type", "size", "modified"],
          [(_name(e) + ("/" if e.type == "dir" else ""), e.type,
            mem(e.size) if e.type == "file" else "", ago(e.modified_at))
           for e in listing.entries])
    if listing.truncated:
        console.print("(more entries than the listing limit)", markup=False)


@app.command("upload")
@friendly
def upload(
    ref: Ref,
    local: Annotated[list[Path], typer.Argument(help="Files and directories to upload.")],
    to: Annotated[str, typer.Option("--to", help="A directory in the folder.")] = "",
) -> None:
    """Upload files and directories (streamed, with progress; a file upload that breaks
    resumes)."""
    with _client() as client:
        folder = client.find_folder(ref)
        for item in local:
            target = str(PurePosixPath(to, item.name)) if to else item.name
            if item.is_dir():
                from gpuslice.client import transfer

                tree = transfer.scan(item)
                with transfer_bar(f"{item.name}/", tree.size) as moved:
                    done = client.upload_dir(folder.id, item, target, moved, tree)
                skipped = f"; left out {len(tree.skipped)} link(s) or special file(s)" \
                    if tree.skipped else ""
                console.print(f"{item} → {folder.name}:{target}/ ({done.files} files, "
                              f"{mem(done.bytes)}){skipped}", markup=False)
            elif item.is_file():
                with transfer_bar(item.name, item.stat().st_size) as moved:
                    entry = client.upload_file(folder.id, item, target, moved)
                console.print(f"{item} → {folder.name}:{entry.path} ({mem(entry.size)})",
                              markup=False)
            else:
                raise CliError(f"{item}: no such file or directory here", 2)


@app.command("download")
@friendly
def download(
    ref: Ref, path: Annotated[str, typer.Argument(help="A file or directory in the folder.")],
    to: Annotated[Path | None, typer.Option("--to", help="Where to put it here.")] = None,
) -> None:
    """Download a file or a directory (streamed, with progress; a broken file download
    resumes where it stopped when run again)."""
    target = to or Path(PurePosixPath(path).name or ".")
    said = shown(path)  # a name given as bytes that are not UTF-8 is printed readable
    with _client() as client:
        folder = client.find_folder(ref)
        try:
            client.list_files(folder.id, path)
            is_dir = True
        except ApiError as err:
            if err.code != "not_a_directory":
                raise
            is_dir = False
        if is_dir:
            with transfer_bar(f"{said or folder.name}/", 0) as moved:
                count = client.download_dir(folder.id, path, target, moved)
            console.print(f"{folder.name}:{said or '/'} → {shown(str(target))}/ "
                          f"({count} files)", markup=False)
            return
        entry = next(e for e in client.list_files(folder.id, _parent(path)).entries
                     if entry_path(e.path, e.raw_path) == path)
        with transfer_bar(PurePosixPath(said).name, entry.size) as moved:
            size = client.download_file(folder.id, path, target, moved)
    console.print(f"{folder.name}:{said} → {shown(str(target))} ({mem(size)})", markup=False)


@app.command("rm")
@friendly
def rm(ref: Ref, path: Annotated[str, typer.Argument(help="A file or directory in it.")],
       yes: YesOpt = False) -> None:
    """Delete a file, or a directory with everything in it (asks first)."""
    with _client() as client:
        folder = client.find_folder(ref)
        confirm(f"Delete {folder.name}:{shown(path)}?", yes)
        client.delete_file(folder.id, path)
    console.print(f"deleted {folder.name}:{shown(path)}", markup=False)


@app.command("mkdir")
@friendly
def mkdir(ref: Ref, path: Annotated[str, typer.Argument(help="The directory to make.")]
          ) -> None:
    """Make a directory (and its parents) in a folder."""
    with _client() as client:
        entry = client.make_dirs(ref, path)
    console.print(f"made {ref}:{entry.path}/", markup=False)


def _name(entry: FileEntry) -> str:
    """An entry's name as a shell takes it back: one that is not UTF-8 (a session wrote it)
    in bash's $'…' form, e.g. $'bad\\xffname', which `rm`, `download`… accept as is."""
    name = PurePosixPath(entry_path(entry.path, entry.raw_path)).name
    if entry.raw_path is None:
        return name
    data = name.encode("utf-8", "surrogateescape")
    return "$'" + "".join(_c_escape(b) for b in data) + "'"


def _c_escape(byte: int) -> str:
    char = chr(byte)
    if byte >= 0x80 or not char.isprintable():
        return f"\\x{byte:02x}"
    return "\\" + char if char in "'\\" else char


def _grants(folder: FolderPublic) -> str:
    if folder.grants is None:
        return ""
    return ", ".join(f"{g.username} ({g.permission.value})" for g in folder.grants) or "-"


def _usage_line(usage: StorageUsage) -> str:
    limit = f"of {mem(usage.quota)} allowed" if usage.quota is not None else "(no quota)"
    over = "; OVER QUOTA: uploads are refused" if usage.over_quota else ""
    held = (f" ({mem(usage.uploading)} of it held by unfinished uploads: finish them, or "
            "they go after a day)") if usage.uploading else ""
    return f"storage of {usage.username}: {mem(usage.used)} used{held} {limit}{over}"


def _parent(path: str) -> str:
    parent = str(PurePosixPath(path).parent)
    return "" if parent == "." else parent
