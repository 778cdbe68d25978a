"""The language server's framing (``lsp_server/framing.py``) in front of pygls' own message loop:
random header spellings, sizes, chunkings, truncated frames and junk.

Invariants:
- well-formed frames, however their headers are spelt (case, CRLF or LF, spaces, extra headers),
  reach the protocol exactly, in order, whatever the read chunk sizes;
- a stream cut anywhere delivers exactly the frames completed before the cut;
- a frame over the size cap is reported (``on_oversize``) and skipped, and the frames after it
  still arrive; memory stays bounded by the cap, never by the announced size;
- arbitrary bytes never raise and the loop always ends at the end of the stream.
"""
from __future__ import annotations

import asyncio
import io
import json
import threading

from hypothesis import given
from hypothesis import strategies as st

from ddp_lint.lsp_server import framing
from ddp_lint.lsp_server.framing import FrameReader
from pygls.io_ import run_async
from tests.fuzz.support import examples

CAP = 2000  # a small cap, so that oversize frames are cheap to generate


class Recorder:
    """The part of pygls' protocol that its loop calls."""

    def __init__(self):
        self.messages: list = []

    def structure_message(self, data):
        return data

    def handle_message(self, message):
        self.messages.append(message)


def run(stream: bytes, chunks: list[int], max_message: int = CAP):
    src = io.BytesIO(stream)
    sizes = iter(chunks)
    peak = [0]
    oversize: list[int] = []

    async def read_some(n: int) -> bytes:
        k = next(sizes, n)
        return src.read(max(1, min(n, k)))

    reader = FrameReader(read_some, max_message=max_message, on_oversize=oversize.append)
    orig_fill = reader._fill

    async def fill():
        got = await orig_fill()
        peak[0] = max(peak[0], len(reader._buf))
        return got

    reader._fill = fill
    proto = Recorder()
    asyncio.run(asyncio.wait_for(run_async(stop_event=threading.Event(), reader=reader, protocol=proto), 30))
    return proto.messages, oversize, peak[0]


names = st.sampled_from(["Content-Length", "content-length", "CONTENT-LENGTH", "Content-length", "cOnTeNt-LeNgTh"])
eols = st.sampled_from([b"\r\n", b"\n"])
spaces = st.sampled_from([b"", b" ", b"  ", b"\t"])
extra = st.sampled_from([b"Content-Type: application/vscode-jsonrpc; charset=utf-8", b"X-Junk: 1", b"Y:"])
payloads = st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=30)), max_size=4)


@st.composite
def frames(draw, body=None):
    obj = {"jsonrpc": "2.0", "id": draw(st.integers(0, 10**6)), "params": draw(payloads)}
    raw = json.dumps(obj).encode() if body is None else body
    eol = draw(eols)
    name = draw(names).encode()
    length = draw(spaces) + name + draw(spaces) + b":" + draw(spaces) + str(len(raw)).encode() + draw(spaces)
    headers = [length] + draw(st.lists(extra, max_size=2))
    headers = draw(st.permutations(headers))
    return eol.join(headers) + eol + eol + raw, obj


chunkings = st.lists(st.integers(1, 300), max_size=50)


@examples(60)
@given(st.lists(frames(), min_size=1, max_size=6), chunkings)
def test_well_formed_frames_round_trip(fs, chunks):
    messages, oversize, _ = run(b"".join(f for f, _ in fs), chunks)
    assert messages == [o for _, o in fs] and not oversize


@examples(60)
@given(st.lists(frames(), min_size=1, max_size=5), st.data(), chunkings)
def test_truncated_stream_delivers_the_complete_frames(fs, data, chunks):
    stream = b"".join(f for f, _ in fs)
    cut = data.draw(st.integers(0, len(stream)))
    messages, _, _ = run(stream[:cut], chunks)
    ends, total = [], 0
    for f, _ in fs:
        total += len(f)
        ends.append(total)
    assert messages == [o for (_, o), e in zip(fs, ends) if e <= cut]


@examples(40)
@given(st.lists(frames(), max_size=3), st.integers(CAP + 1, 10**15), st.booleans(), st.lists(frames(), max_size=3),
       chunkings)
def test_oversize_frame_is_skipped_with_bounded_memory(before, size, send_body, after, chunks):
    head = b"Content-Length: %d\r\n\r\n" % size
    body = b"x" * min(size, 3 * CAP) if send_body else b""
    complete = send_body and size <= 3 * CAP
    stream = b"".join(f for f, _ in before) + head + body + (b"".join(f for f, _ in after) if complete else b"")
    messages, oversize, peak = run(stream, chunks)
    assert oversize == [size]
    assert messages[: len(before)] == [o for _, o in before]
    if complete:
        assert messages[len(before):] == [o for _, o in after]
    assert peak <= CAP + framing.CHUNK + framing.MAX_HEADER_LINE


@examples(60)
@given(st.lists(st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"\r\n", b"\n", b"\r\n\r\n", b"Content-Length: 5\r\n\r\n", b"content-length:99999999999999999999999\n\n",
                     b"Content-Length: -1\r\n\r\n", b"{}", b"\x00", b":" * 50]),
    frames().map(lambda f: f[0])), max_size=12), chunkings)
def test_arbitrary_bytes_never_raise(parts, chunks):
    messages, _, peak = run(b"".join(parts), chunks)
    assert all(isinstance(m, (dict, list, str, int, float, bool, type(None))) for m in messages)
    assert peak <= CAP + framing.CHUNK + framing.MAX_HEADER_LINE


@examples(20)
@given(frames(), st.binary(min_size=1, max_size=3000).filter(lambda b: b"\n" not in b), chunkings)
def test_resync_after_a_bad_header_block(good, junk_line, chunks):
    """A header block that ends (blank line) without a usable Content-Length is skipped, and the
    next frame arrives (junk without a newline is one over-long or malformed header line)."""
    stream = junk_line.replace(b":", b"_") + b"\r\n\r\n" + good[0]
    messages, _, _ = run(stream, chunks)
    assert messages == [good[1]]
