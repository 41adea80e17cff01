"""boto3 as the tests of Bedrock's dialects use it: its `bedrock-runtime` client pointed at a loopback server
(`bedrock_client`) and a bundled cassette by name (`bundled_cassette`). (A module that uses boto3 asks for conftest's
`collected` too.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from botocore.config import Config

from sse_tape import Cassette, bundled_cassettes


@contextmanager
def bedrock_client(url: str, **credentials: str) -> Iterator[Any]:
    """boto3's Bedrock runtime client, pointed at `url` with dummy credentials (unless others are given), closed
    after the block; no retries, so that an error comes at once."""
    made = boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        **({"aws_access_key_id": "x", "aws_secret_access_key": "x"} | credentials),
        config=Config(retries={"max_attempts": 1, "mode": "standard"}),
    )
    try:
        yield made
    finally:
        made.close()


def bundled_cassette(name: str) -> Cassette:
    """The bundled cassette `name` (`bedrock-converse.toml`)."""
    return Cassette.load(next(p for p in bundled_cassettes() if p.name == name))
