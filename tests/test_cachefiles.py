"""Cache entry files: frames refuse every damaged byte; only plain files of ours are read."""

from __future__ import annotations

import os
import stat
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachefaults import full_disk, owned_by_another
from specdsl._base.cachefiles import (
    BYTECODE_MAGIC,
    FACTS_MAGIC,
    HEADER_SIZE,
    MAGIC,
    MAX_ENTRY_BYTES,
    PTX_MAGIC,
    frame,
    read_entry,
    unframe,
    write_entry,
)

KEY = bytes(range(32))
PAYLOADS = {MAGIC: b"\x7fELF" + bytes(range(200)), PTX_MAGIC: b".version 8.0\n.target sm_90\n",
            BYTECODE_MAGIC: bytes(range(256)) * 2, FACTS_MAGIC: b'{"names": [], "references": []}'}
# (first byte, end) of each part of the header, then the payload
PARTS = {"format tag": (0, 16), "key": (16, 48), "digest": (48, 80), "length": (80, 88),
         "payload": (88, None)}


@pytest.mark.parametrize("magic", PAYLOADS, ids=lambda m: m.decode(errors="replace").strip())
def test_round_trip(magic):
    """A frame gives back its payload, for its key and format only."""
    entry = frame(KEY, PAYLOADS[magic], magic)
    assert unframe(KEY, entry, magic) == PAYLOADS[magic]
    assert unframe(bytes(32), entry, magic) is None
    assert all(unframe(KEY, entry, other) is None for other in PAYLOADS if other != magic)


@pytest.mark.parametrize("magic", PAYLOADS, ids=lambda m: m.decode(errors="replace").strip())
@pytest.mark.parametrize("part", PARTS)
def test_every_byte_of_every_part_is_checked(magic, part):
    """Changing any one byte of the tag, key, digest, length or payload makes a miss."""
    entry = frame(KEY, PAYLOADS[magic], magic)
    start, end = PARTS[part]
    for position in range(start, len(entry) if end is None else end):
        damaged = bytearray(entry)
        damaged[position] ^= 0x01
        assert unframe(KEY, bytes(damaged), magic) is None, position


@pytest.mark.parametrize("magic", PAYLOADS, ids=lambda m: m.decode(errors="replace").strip())
def test_every_truncation_is_a_miss(magic):
    """An entry cut at any length, from empty to one byte short, is a miss."""
    entry = frame(KEY, PAYLOADS[magic], magic)
    assert all(unframe(KEY, entry[:cut], magic) is None for cut in range(len(entry)))
    assert unframe(KEY, entry + b"\0", magic) is None


@settings(max_examples=300, deadline=None)
@given(magic=st.sampled_from(sorted(PAYLOADS)), data=st.data())
def test_random_bit_flips_are_misses(magic, data):
    """Any set of flipped bits anywhere in an entry makes a miss."""
    entry = bytearray(frame(KEY, PAYLOADS[magic], magic))
    flips = data.draw(st.sets(st.integers(0, len(entry) * 8 - 1), min_size=1, max_size=8))
    for bit in flips:
        entry[bit // 8] ^= 1 << (bit % 8)
    assert unframe(KEY, bytes(entry), magic) is None


def test_payload_checks_beyond_the_digest():
    """A digest-true cubin that is no ELF image, or PTX that is no UTF-8, is refused."""
    assert unframe(KEY, frame(KEY, b"MZ\0\0"), MAGIC) is None
    assert unframe(KEY, frame(KEY, b"\xff\xfe", PTX_MAGIC), PTX_MAGIC) is None
    assert unframe(KEY, frame(KEY, b"\xff\xfe", FACTS_MAGIC), FACTS_MAGIC) is None


# -- reading only plain files of ours ----------------------------------------------------------


def test_reads_a_plain_file(tmp_path):
    """A regular file of ours, mode 0600, is read whole."""
    path = tmp_path / "entry"
    path.write_bytes(b"x" * 1000)
    path.chmod(0o600)
    assert read_entry(path) == b"x" * 1000


def test_missing_file_is_file_not_found(tmp_path):
    """No file: FileNotFoundError, the plain miss."""
    with pytest.raises(FileNotFoundError):
        read_entry(tmp_path / "none")


def test_fifo_is_refused_without_blocking(tmp_path):
    """A FIFO at an entry path is refused at once (no reader hangs on it)."""
    path = tmp_path / "entry"
    os.mkfifo(path, 0o600)
    done = []
    reader = threading.Thread(target=lambda: done.append(read_entry(path)), daemon=True)
    reader.start()
    reader.join(5)
    assert done == [None]


def test_link_to_dev_zero_is_refused(tmp_path):
    """A symbolic link (here to /dev/zero, which never ends) is refused, not followed."""
    path = tmp_path / "entry"
    path.symlink_to("/dev/zero")
    assert read_entry(path) is None


def test_link_to_a_plain_file_is_refused(tmp_path):
    """A symbolic link is refused even when it points at a good file."""
    (tmp_path / "real").write_bytes(b"data")
    (tmp_path / "entry").symlink_to(tmp_path / "real")
    assert read_entry(tmp_path / "entry") is None


def test_folder_is_refused(tmp_path):
    """A folder at an entry path is refused."""
    (tmp_path / "entry").mkdir()
    assert read_entry(tmp_path / "entry") is None


def test_device_is_refused():
    """A device file (/dev/null) is refused."""
    assert read_entry("/dev/null") is None


def test_file_over_the_bound_is_refused(tmp_path):
    """A file larger than the bound is refused before it is read."""
    path = tmp_path / "entry"
    path.write_bytes(b"x" * 101)
    path.chmod(0o600)
    assert read_entry(path, limit=100) is None and read_entry(path, limit=101) == b"x" * 101
    assert MAX_ENTRY_BYTES == 64 << 20


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_file_others_can_write_is_refused(tmp_path, mode):
    """A file its group or everyone can write is refused (someone else may have written it)."""
    path = tmp_path / "entry"
    path.write_bytes(b"data")
    path.chmod(mode)
    assert read_entry(path) is None


def test_file_of_another_user_is_refused(tmp_path, monkeypatch):
    """A file owned by another user is refused."""
    path = tmp_path / "entry"
    path.write_bytes(b"data")
    path.chmod(0o600)
    owned_by_another(monkeypatch, path)
    assert read_entry(path) is None


def test_read_marks_the_entry_used(tmp_path):
    """A read sets the access time to now and keeps the modification time."""
    path = tmp_path / "entry"
    path.write_bytes(b"data")
    path.chmod(0o600)
    os.utime(path, ns=(1_000_000_000, 2_000_000_000))
    read_entry(path)
    info = os.stat(path)
    assert info.st_mtime_ns == 2_000_000_000 and info.st_atime_ns > 2_000_000_000


# -- writing ----------------------------------------------------------------------------------


def test_write_is_private_and_whole(tmp_path):
    """A written entry has mode 0600 and the whole payload; the temp folder is left empty."""
    (tmp_path / "tmp").mkdir()
    write_entry(tmp_path / "entry", b"payload", tmp_path / "tmp")
    assert (tmp_path / "entry").read_bytes() == b"payload"
    assert stat.S_IMODE(os.stat(tmp_path / "entry").st_mode) == 0o600
    assert list((tmp_path / "tmp").iterdir()) == []


def test_failed_write_leaves_no_temp_file(tmp_path, monkeypatch):
    """A full disk fails the write part-way: OSError, the old entry kept, no temp file left."""
    (tmp_path / "tmp").mkdir()
    write_entry(tmp_path / "entry", b"old", tmp_path / "tmp")
    full_disk(monkeypatch, tmp_path)
    with pytest.raises(OSError, match="No space left"):
        write_entry(tmp_path / "entry", b"new" * 100, tmp_path / "tmp")
    assert (tmp_path / "entry").read_bytes() == b"old"
    assert list((tmp_path / "tmp").iterdir()) == []


def test_header_size():
    """The header is 16 + 32 + 32 + 8 bytes."""
    assert HEADER_SIZE == 88
