"""Read an OpenAI-style multipart transcription request, streaming the file to disk.

A file part larger than ``memory_audio.MAX_BYTES`` never sits in memory: it is written to a temporary file chunk
by chunk and the byte limit is enforced as it arrives (and up front from ``Content-Length``), so an hour-long
upload costs a disk file, and an oversized one is refused without reading it all. A smaller one is read into
memory first and kept there if ``asr.offline.memory_audio`` decodes it (``Upload.data``), else written
to a temporary file as the larger ones are.
The temporary file is removed on every way out of ``read_upload`` that does not hand it over:
a refused or malformed body (400/413), a client that disconnects mid-upload, a cancellation.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from asr.offline.decode import AudioInfo, PcmLayout
from asr.offline.errors import ApiError
from asr.offline.memory_audio import MAX_BYTES, memory_audio

FIELD_LIMIT = 64 * 1024  # bytes for any text field


@dataclass
class Upload:
    path: Path | None = None
    filename: str = ""
    size: int = 0
    fields: dict[str, list[str]] = field(default_factory=dict)
    data: bytes | None = None  # a small file kept in memory (no ``path``) ...
    memory_info: tuple[AudioInfo, PcmLayout | None] | None = None  # ... and what it holds (``memory_audio``)

    @property
    def has_file(self) -> bool:
        return self.path is not None or self.data is not None

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else default

    def cleanup(self) -> None:
        self.data = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


class UploadProgress:
    """How much of the file part is on disk, for a reader that starts before the upload ends.

    ``started`` is set (on the event loop) once the file part has ``HEAD_BYTES`` on disk, or the upload
    ended; ``wait_for(n)`` blocks a thread until ``n`` bytes are on disk (True) or the upload ended
    short of them (False). ``fields`` are the text fields that came before the file part.
    """

    HEAD_BYTES = 64 * 1024

    def __init__(self) -> None:
        self.path: Path | None = None
        self.fields: dict[str, list[str]] = {}
        self.written = 0
        self.done = False
        self._need = 0  # bytes the reader waits for
        self.started = asyncio.get_running_loop().create_future()
        self._cond = threading.Condition()

    def advance(self, written: int) -> None:
        with self._cond:
            self.written = written
            if written >= self._need:  # wake the reader only once what it waits for is there
                self._cond.notify_all()
        if written >= self.HEAD_BYTES and not self.started.done():
            self.started.set_result(None)

    def end(self) -> None:
        with self._cond:
            self.done = True
            self._cond.notify_all()
        if not self.started.done():
            self.started.set_result(None)

    def has(self, n: int) -> bool:
        return self.written >= n

    def wait_for(self, n: int) -> bool:
        with self._cond:
            self._need = n
            self._cond.wait_for(lambda: self.done or self.written >= n)
            self._need = 0
            return self.written >= n


async def read_upload(request: web.Request, max_bytes: int, tmp_dir: str | None = None,
                      progress: UploadProgress | None = None) -> Upload:
    """Parse the multipart body; raises ``ApiError`` (400 or 413). The caller must ``cleanup()``.

    With ``progress``, the file part's bytes are reported as they reach the disk."""
    try:
        return await _read_upload(request, max_bytes, tmp_dir, progress)
    finally:
        if progress is not None:
            progress.end()


async def _read_upload(request: web.Request, max_bytes: int, tmp_dir: str | None,
                       progress: UploadProgress | None) -> Upload:
    if request.content_length is not None and request.content_length > max_bytes + FIELD_LIMIT:
        raise _too_large(max_bytes)
    if not request.content_type.startswith("multipart/"):
        raise ApiError(400, "the request must be multipart/form-data with a 'file' part", param="file")
    upload = Upload()
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            name = part.name or ""
            if name == "file" and part.filename is not None:  # type: ignore[union-attr]
                if upload.has_file:
                    raise ApiError(400, "send one 'file' part, not several", param="file")
                await _save_file(part, upload, max_bytes, tmp_dir, progress)  # type: ignore[arg-type]
            else:
                text = await part.read(decode=True)  # type: ignore[union-attr]
                if len(text) > FIELD_LIMIT:
                    raise ApiError(400, f"the field {name!r} is too long", param=name)
                upload.fields.setdefault(name, []).append(text.decode("utf-8", "replace"))
    except ApiError:
        upload.cleanup()
        raise
    except (ConnectionError, asyncio.CancelledError):  # the client went away mid-upload
        upload.cleanup()
        raise
    except Exception as exc:  # a malformed multipart body: ValueError, AssertionError, LookupError, ...
        upload.cleanup()
        raise ApiError(400, f"malformed multipart body ({type(exc).__name__}: {str(exc)[:200]})") from None
    except BaseException:
        upload.cleanup()
        raise
    return upload


async def _save_file(part: object, upload: Upload, max_bytes: int, tmp_dir: str | None,
                     progress: UploadProgress | None = None) -> None:
    filename = getattr(part, "filename", "") or ""
    head = b""
    if progress is None:  # no early reader needs it on disk: the first MAX_BYTES in memory
        buf = bytearray()
        while len(buf) <= MAX_BYTES and (chunk := await part.read_chunk(1 << 20)):  # type: ignore[attr-defined]
            buf += chunk
            upload.size += len(chunk)
            if upload.size > max_bytes:
                raise _too_large(max_bytes)
        head = bytes(buf)
        if len(head) <= MAX_BYTES:  # all of it
            upload.filename = filename
            # a WAV's header is read here; libsndfile's look at anything else (an MP3 is scanned) in a thread
            upload.memory_info = (memory_audio(head) if head[:4] == b"RIFF"
                                  else await asyncio.to_thread(memory_audio, head))
            if upload.memory_info is not None:
                upload.data = head
                return
        # to disk: the head, then the rest
    suffix = Path(filename).suffix[:16]
    fd, name = tempfile.mkstemp(prefix="cadence-upload-", suffix=suffix, dir=tmp_dir)
    upload.path, upload.filename = Path(name), filename
    if progress is not None:
        progress.path = upload.path
        progress.fields = {k: list(v) for k, v in upload.fields.items()}
    with os.fdopen(fd, "wb") as f:
        f.write(head)
        while chunk := await part.read_chunk(1 << 20):  # type: ignore[attr-defined]
            upload.size += len(chunk)
            if upload.size > max_bytes:
                raise _too_large(max_bytes)
            f.write(chunk)
            if progress is not None:
                f.flush()
                progress.advance(upload.size)


def _too_large(max_bytes: int) -> ApiError:
    return ApiError(413, f"the upload is larger than the server's limit of {max_bytes / 1e6:.0f} MB",
                    param="file", code="file_too_large")
