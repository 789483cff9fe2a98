"""The agent's icon: ``--card-icon FILE``, else ``<first workspace>/icon.png``, served
as a square 256 px PNG at ``<JSON-RPC mount>/icon.png`` and named as ``iconUrl`` on the
public and the extended card (seed: the 256 px square preset, on the card's origin).

The file is made square once, not per request: with Pillow, in a worker thread, when the
gateway starts and again whenever the file's stat changes (looked at when the icon or
the public card is asked for, so a new icon needs no restart). Any image Pillow reads
will do: it is scaled to fit 256 x 256 (up or down, aspect kept) and centred on a
transparent square. A file that is too large or no image is logged once (its path,
never its bytes) and there is no icon: the cards omit ``iconUrl`` and the path is 404.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageOps

log = logging.getLogger(__name__)

ICON_FILE = "icon.png"
ICON_PX = 256
#: Larger files are refused before Pillow sees them.
MAX_ICON_BYTES = 10 * 1024 * 1024
#: Larger images are refused from their header, before they are decoded (under Pillow's
#: own decompression-bomb threshold, which would warn).
MAX_ICON_PIXELS = 40_000_000
PNG = "image/png"

_Stamp = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class Icon:
    """The served icon: its PNG bytes and their ETag."""

    png: bytes
    etag: str


def square_png(data: bytes, size: int = ICON_PX) -> bytes:
    """``data`` (any image Pillow reads) as a ``size`` px square PNG; ValueError or
    OSError when it is no image or too large."""
    with Image.open(io.BytesIO(data)) as image:
        if image.width * image.height > MAX_ICON_PIXELS:
            raise ValueError(f"larger than {MAX_ICON_PIXELS} pixels")
        rgba = image.convert("RGBA")
    if rgba.size != (size, size):
        fitted = ImageOps.contain(rgba, (size, size), Image.Resampling.LANCZOS)
        rgba = Image.new("RGBA", (size, size), (0, 0, 0, 0))
        rgba.paste(fitted, ((size - fitted.width) // 2, (size - fitted.height) // 2))
    out = io.BytesIO()
    rgba.save(out, "PNG", optimize=True)
    return out.getvalue()


def _make_icon(path: Path) -> Icon:
    """Read and square ``path`` (run in a worker thread)."""
    with path.open("rb") as handle:
        data = handle.read(MAX_ICON_BYTES + 1)
    if len(data) > MAX_ICON_BYTES:
        raise ValueError(f"larger than {MAX_ICON_BYTES} bytes")
    png = square_png(data)
    return Icon(png, '"' + hashlib.sha256(png).hexdigest()[:32] + '"')


class CardIcon:
    """The icon of one gateway (see the module docstring); ``path`` None: no icon."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.icon: Icon | None = None
        self._stamp: _Stamp | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def for_gateway(cls, setting: str, workspaces: list[Path]) -> CardIcon:
        """``--card-icon`` when set, else the first workspace's icon.png, else none."""
        if setting.strip():
            return cls(Path(setting.strip()))
        return cls(workspaces[0] / ICON_FILE if workspaces else None)

    async def refresh(self) -> Icon | None:
        """The icon, made again first when its file changed (or went)."""
        path = self.path
        if path is None:
            return None
        try:
            st = os.stat(path)  # as for callers.json: a stat per look, on the loop
        except OSError:
            self.icon, self._stamp = None, None
            return None
        stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return self.icon
        async with self._lock:
            if stamp != self._stamp:  # not made meanwhile by another request
                try:
                    self.icon = await asyncio.to_thread(_make_icon, path)
                except (OSError, ValueError, Image.DecompressionBombError) as exc:
                    log.warning("icon %s cannot be used (%s): no iconUrl", path, _why(exc))
                    self.icon = None
                self._stamp = stamp
        return self.icon


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)[:200] or type(exc).__name__


def icon_path(jsonrpc_mount: str) -> str:
    """Where the icon is served: ``<JSON-RPC mount>/icon.png``."""
    mount = jsonrpc_mount.strip().strip("/")
    return f"/{mount}/{ICON_FILE}" if mount else f"/{ICON_FILE}"


__all__ = ["ICON_FILE", "ICON_PX", "PNG", "CardIcon", "Icon", "icon_path", "square_png"]
