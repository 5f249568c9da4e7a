"""The bundled text-to-speech handler: splitting, merging, synthesis."""

from __future__ import annotations

import random
import re
import shutil
import struct
import wave
from pathlib import Path

import pytest

from tests.bundledkit import ctx, handler

# --- text-to-speech -----------------------------------------------------------------------

MIXED = (
    "Spindle temperature is 90.3 °C, above the 90 °C limit! Stop the machine.\n"
    "主轴温度过高，请立即停机检查。冷却系统正常吗？是的；润滑系统也正常。"
    "Check the chiller, the lubrication and the fan; then run the warm-up cycle. "
    + "这是一个没有标点的非常长的中文句子" * 30
    + " and a very long English clause without any stop " * 20
    + "🙂 emoji 🙂 end."
)


@pytest.mark.parametrize("max_bytes", [4, 5, 7, 16, 50, 120, 300, 600])
def test_split_text_respects_the_byte_limit_and_loses_nothing(max_bytes: int) -> None:
    tts = handler("text-to-speech")
    chunks = tts.split_text(MIXED, max_bytes)
    assert "".join(chunks) == MIXED  # order kept, nothing lost or added
    for chunk in chunks:
        encoded = chunk.encode("utf-8")
        assert 0 < len(encoded) <= max_bytes
        assert encoded.decode("utf-8") == chunk  # never half a character
    assert b"".join(c.encode("utf-8") for c in chunks) == MIXED.encode("utf-8")


def test_split_text_random_texts() -> None:
    tts = handler("text-to-speech")
    rng = random.Random(5)
    alphabet = list("ab cd  。！？；，.!?;,\n中文字符é€🙂")
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        limit = rng.randint(4, 64)
        chunks = tts.split_text(text, limit)
        assert "".join(chunks) == text
        assert all(0 < len(c.encode("utf-8")) <= limit for c in chunks)


def test_split_text_cuts_at_punctuation_when_it_can() -> None:
    tts = handler("text-to-speech")
    text = "第一句话。第二句话！Third one? Fourth; fifth, sixth.\nSeventh"
    assert tts.split_sentences(text) == [
        "第一句话。",
        "第二句话！",
        "Third one? ",
        "Fourth; ",
        "fifth, ",
        "sixth.\n",
        "Seventh",
    ]
    assert tts.split_sentences("Pi is 3.14, e.g. 1,000 items.") == [
        "Pi is 3.14, ",
        "e.g. ",
        "1,000 items.",
    ]
    chunks = tts.split_text("一二三四五。六七八九十。", 18)  # 15 + 3 bytes per sentence
    assert chunks == ["一二三四五。", "六七八九十。"]
    assert tts.split_text("short. text.", 600) == ["short. text."]
    assert tts.MAX_CHUNK_BYTES == 600


def write_wav(path: Path, frames: int, value: int, rate: int = 22050) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(struct.pack("<h", value) * frames)


def test_merge_wav_concatenates_in_order_with_correct_sizes(tmp_path: Path) -> None:
    tts = handler("text-to-speech")
    a, b, out = tmp_path / "a.wav", tmp_path / "b.wav", tmp_path / "out.wav"
    write_wav(a, 1000, 100)
    write_wav(b, 2500, -200)
    info = tts.merge_wav([a, b], out)
    assert info["frames"] == 3500
    assert info["duration_s"] == pytest.approx(3500 / 22050, abs=1e-3)
    raw = out.read_bytes()
    assert raw[:4] == b"RIFF"
    assert raw[8:12] == b"WAVE"
    assert struct.unpack("<I", raw[4:8])[0] == len(raw) - 8
    data_at = raw.index(b"data")
    assert struct.unpack("<I", raw[data_at + 4 : data_at + 8])[0] == 3500 * 2
    assert len(raw) == data_at + 8 + 3500 * 2
    with wave.open(str(out), "rb") as wav:
        assert wav.getnframes() == 3500
        samples = wav.readframes(3500)
    assert samples[:2] == struct.pack("<h", 100)
    assert samples[-2:] == struct.pack("<h", -200)
    assert samples[1998:2002] == struct.pack("<h", 100) + struct.pack("<h", -200)


def test_merge_wav_refuses_mismatched_formats(tmp_path: Path) -> None:
    tts = handler("text-to-speech")
    write_wav(tmp_path / "a.wav", 10, 1, rate=22050)
    write_wav(tmp_path / "b.wav", 10, 1, rate=16000)
    with pytest.raises(ValueError, match=re.escape("b.wav")):
        tts.merge_wav([tmp_path / "a.wav", tmp_path / "b.wav"], tmp_path / "out.wav")


def test_tts_without_espeak_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(shutil, "which", lambda *_a, **_k: None)
    with pytest.raises(RuntimeError, match="apt-get install espeak-ng"):
        handler("text-to-speech").synthesize_speech(
            text="Hello.", context=ctx("text-to-speech", tmp_path)
        )


def test_tts_guesses_the_voice_from_the_text() -> None:
    tts = handler("text-to-speech")
    assert tts.guess_voice("主轴温度过高，请停机。") == "zh"
    assert tts.guess_voice("Spindle too hot, CNC-001 主轴") == "en"


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_tts_real_synthesis_of_a_multi_chunk_text(tmp_path: Path) -> None:
    tts = handler("text-to-speech")
    text = "Stop the spindle at the end of the cut. " * 20 + "主轴温度过高。"
    context = ctx("text-to-speech", tmp_path)
    result = tts.synthesize_speech(text=text, voice="en", speed=220, context=context)
    path = Path(result["path"])
    assert path.parent == tmp_path / "text-to-speech" / "tts"
    assert result["chunks"] == len(tts.split_text(text)) >= 2
    assert result["bytes"] == path.stat().st_size
    with wave.open(str(path), "rb") as wav:
        assert wav.getnframes() / wav.getframerate() == pytest.approx(
            result["duration_s"], abs=0.01
        )
    assert result["duration_s"] > 5
    assert tts.synthesize_speech(text=text, voice="en", speed=220, context=context)["cached"]
    with pytest.raises(ValueError, match="no voice"):
        tts.synthesize_speech(text="Hello.", voice="xx-nope", context=context)
