"""Text to speech with espeak-ng: split at punctuation, synthesise in parallel, merge in order.

Long text is cut into chunks of at most ``MAX_CHUNK_BYTES`` UTF-8 bytes, preferably at the end
of a sentence or clause, each chunk is synthesised by its own ``espeak-ng`` process, and the
WAV files are joined, in the original order, into one file with a correct header.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import wave
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.skills.context import ToolContext

# The seed's TTS API accepted at most 600 UTF-8 bytes per request; we keep that chunk size:
# it bounds the work of one espeak-ng process and gives the parallel calls even sizes.
MAX_CHUNK_BYTES = 600
MAX_WORKERS = 4
CHUNK_TIMEOUT_S = 60
ATTEMPTS = 2  # one retry per chunk: a failed chunk should not lose the whole text

# Always a boundary (Chinese full-width marks and line breaks).
_HARD_BREAKS = frozenset("。！？；，、：…\n")
# A boundary only before whitespace or the end, so 3.14, 1,000, e.g. and 12:30 stay whole.
_SOFT_BREAKS = frozenset(".!?;,:")
# Carried along with the boundary that precedes them.
_TRAILING = frozenset("\"')]}”’）》」』") | _HARD_BREAKS | _SOFT_BREAKS
INSTALL_HINT = "install it with `apt-get install espeak-ng` (Debian/Ubuntu) and try again"


def utf8_len(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes."""
    return len(text.encode("utf-8"))


def split_sentences(text: str) -> list[str]:
    """Cut ``text`` after each sentence or clause mark, losslessly (the pieces join to it)."""
    pieces: list[str] = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        char = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if char in _HARD_BREAKS or (char in _SOFT_BREAKS and (not nxt or nxt.isspace())):
            i += 1
            while i < n and (text[i] in _TRAILING or text[i].isspace()):
                i += 1
            pieces.append(text[start:i])
            start = i
        else:
            i += 1
    if start < n:
        pieces.append(text[start:])
    return pieces


def _hard_split(piece: str, max_bytes: int) -> list[str]:
    """Cut a piece longer than ``max_bytes`` at whole characters, after a space if possible."""
    parts: list[str] = []
    buf: list[str] = []
    size = 0
    for char in piece:
        width = utf8_len(char)
        while size + width > max_bytes:
            cut = next((k for k in range(len(buf) - 1, -1, -1) if buf[k].isspace()), None)
            if cut is None:
                parts.append("".join(buf))
                buf, size = [], 0
            else:
                parts.append("".join(buf[: cut + 1]))
                buf = buf[cut + 1 :]
                size = utf8_len("".join(buf))
        buf.append(char)
        size += width
    if buf:
        parts.append("".join(buf))
    return parts


def split_text(text: str, max_bytes: int = MAX_CHUNK_BYTES) -> list[str]:
    """Chunks of at most ``max_bytes`` UTF-8 bytes that join back to exactly ``text``.

    Sentences and clauses are packed together while they fit; a cut falls after
    punctuation (。！？；，.!?;, and line breaks) whenever one is in reach. A single
    sentence longer than ``max_bytes`` is cut after a space, or else between two
    characters — never inside a multi-byte character.
    """
    if max_bytes < 4:
        raise ValueError("max_bytes must be at least 4 (one UTF-8 character can take 4 bytes)")
    chunks: list[str] = []
    current = ""
    for piece in split_sentences(text):
        if utf8_len(current) + utf8_len(piece) <= max_bytes:
            current += piece
            continue
        if current:
            chunks.append(current)
            current = ""
        if utf8_len(piece) <= max_bytes:
            current = piece
        else:
            *full, current = _hard_split(piece, max_bytes)
            chunks.extend(full)
    if current:
        chunks.append(current)
    return chunks


def merge_wav(inputs: list[Path], output: Path) -> dict[str, Any]:
    """Concatenate WAV files, in the given order, into ``output``.

    All inputs must share channels, sample width and rate. The ``wave`` module writes the
    header, so the RIFF and data chunk sizes match the frames written.
    """
    if not inputs:
        raise ValueError("no WAV files to merge")
    with wave.open(str(inputs[0]), "rb") as first:
        params = first.getparams()
    frames = 0
    with wave.open(str(output), "wb") as out:
        out.setnchannels(params.nchannels)
        out.setsampwidth(params.sampwidth)
        out.setframerate(params.framerate)
        for path in inputs:
            with wave.open(str(path), "rb") as src:
                got = (src.getnchannels(), src.getsampwidth(), src.getframerate())
                want = (params.nchannels, params.sampwidth, params.framerate)
                if got != want:
                    raise ValueError(
                        f"{Path(path).name} has channels/sample width/rate {got}, expected {want}"
                    )
                while block := src.readframes(65536):
                    out.writeframes(block)
                frames += src.getnframes()
    return {
        "frames": frames,
        "duration_s": round(frames / params.framerate, 3),
        "sample_rate": params.framerate,
        "channels": params.nchannels,
        "sample_width": params.sampwidth,
    }


def _espeak() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError(
            f"Text to speech needs espeak-ng, which is not installed; {INSTALL_HINT}."
        )
    return exe


def _speakable(chunk: str) -> bool:
    return any(char.isalnum() for char in chunk)


def _synthesise(exe: str, chunk: str, out: Path, voice: str, speed: int, pitch: int) -> Path:
    cmd = [exe, "-b", "1", "-v", voice, "-s", str(speed), "-p", str(pitch)]
    cmd += ["-w", str(out), "--stdin"]  # text on stdin: a chunk starting with "-" is no option
    error = ""
    for _ in range(ATTEMPTS):
        try:
            proc = subprocess.run(
                cmd, input=chunk.encode("utf-8"), capture_output=True, timeout=CHUNK_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            error = f"no result within {CHUNK_TIMEOUT_S} s"
            continue
        if proc.returncode == 0 and out.exists():
            return out
        error = proc.stderr.decode("utf-8", "replace").strip()
        if "voice" in error.lower():
            raise ValueError(
                f"espeak-ng has no voice {voice!r}; use a language code such as en, en-us, "
                "zh, fr or de (list_tts_voices shows them)."
            )
    raise RuntimeError(f"espeak-ng failed on a chunk: {error or 'no output'}")


def guess_voice(text: str) -> str:
    """``zh`` when at least a third of the letters are Chinese characters, else ``en``."""
    letters = [c for c in text if c.isalpha()]
    chinese = sum(1 for c in letters if "\u3400" <= c <= "\u9fff")
    return "zh" if letters and chinese * 3 >= len(letters) else "en"


def synthesize_speech(
    text: str,
    voice: str | None = None,
    speed: int = 175,
    pitch: int = 50,
    *,
    context: ToolContext,
) -> dict[str, Any]:
    """Speak ``text`` into one WAV file under ``data_dir/tts`` and describe the file.

    Without ``voice`` the language is guessed from the text (Chinese or English).
    """
    chunks = [c for c in split_text(text) if _speakable(c)]
    if not chunks:
        raise ValueError("There is nothing to read aloud in the text.")
    exe = _espeak()
    voice = voice.strip() if voice else guess_voice(text)
    out_dir = Path(context.data_dir) / "tts"
    out_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(f"{voice}|{speed}|{pitch}|{text}".encode()).hexdigest()[:20]
    target = out_dir / f"tts-{digest}.wav"
    cached = target.exists()
    if not cached:
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".work-") as work:
            paths = [Path(work) / f"chunk-{i:04d}.wav" for i in range(len(chunks))]
            with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(chunks))) as pool:
                futures = [
                    pool.submit(_synthesise, exe, chunk, path, voice, speed, pitch)
                    for chunk, path in zip(chunks, paths, strict=True)
                ]
                ordered = [future.result() for future in futures]
            partial = Path(work) / "merged.wav"
            merge_wav(ordered, partial)
            os.replace(partial, target)
    with wave.open(str(target), "rb") as wav:
        frames, rate = wav.getnframes(), wav.getframerate()
    return {
        "path": str(target),
        # The service makes it an attachment of the conversation (GET .../attachments/ID).
        "files": [{"path": str(target), "caption": f"Speech ({voice}): {_caption(text)}"}],
        "file": target.name,
        "bytes": target.stat().st_size,
        "duration_s": round(frames / rate, 2),
        "chunks": len(chunks),
        "voice": voice,
        "speed": speed,
        "sample_rate": rate,
        "cached": cached,
    }


def _caption(text: str, limit: int = 80) -> str:
    """The start of the spoken text, on one line."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


_VOICE_LINE = re.compile(r"^\s*(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")


def list_tts_voices(language: str | None = None) -> list[dict[str, str]]:
    """The espeak-ng voices installed, optionally only those for one language code."""
    exe = _espeak()
    arg = f"--voices={language}" if language else "--voices"
    proc = subprocess.run([exe, arg], capture_output=True, timeout=15, check=False)
    voices = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines()[1:]:
        match = _VOICE_LINE.match(line)
        if match:
            _, lang, gender, name, _file = match.groups()
            voices.append({"voice": lang, "gender": gender.split("/")[-1], "name": name})
    return voices
