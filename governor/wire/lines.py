"""The control protocol's lines (:mod:`governor.wire.protocol` has the transport): a message as
the one line of UTF-8 JSON it travels as. Apart so that ``governor run`` sends its launch
without loading every operation's types.
"""

from __future__ import annotations

import json
import re


def request_line(request) -> bytes:
    """``request`` (a request type's instance: :mod:`governor.wire.request_types`) as the
    line a client sends."""
    return as_line(encode_json(request.to_json()))


def encode_json(value: object) -> str:
    """``value`` as compact JSON text, as replies are written (parts of a reply encoded apart,
    then joined: :class:`governor.wire.status.StatusReply`).

    Raises:
        ValueError: NaN or infinity in ``value``.
        TypeError: something JSON cannot encode.
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def as_line(text: str) -> bytes:
    """A reply's JSON text as the bytes of one line."""
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (a name read with surrogateescape): shown as U+FFFD
        return LONE_SURROGATE.sub("\ufffd", text).encode() + b"\n"


# A surrogate code point left alone: JSON's "\udcff" escape, or an undecodable byte read with
# surrogateescape. Pairs were already joined by json.loads, so any match is lone.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
