"""The official SDKs as the tests' clients: openai, and anthropic."""

from __future__ import annotations

import anthropic
import httpx
import httpx2
import openai


def openai_client(base_url: str, *, api_key: str = "sk-test", max_retries: int = 0) -> openai.OpenAI:
    """An SDK client that keeps no idle connection.

    Tests make many clients; one whose pooled connection outlived it would be
    collected later and warn, as an unclosed socket, inside some other test.
    """
    http = openai.DefaultHttpxClient(limits=httpx.Limits(max_keepalive_connections=0))
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=max_retries, http_client=http)


def anthropic_client(base_url: str, *, api_key: str = "sk-ant-test", max_retries: int = 0) -> anthropic.Anthropic:
    """Anthropic's SDK client, keeping no idle connection either (see `openai_client`); it is built on httpx2."""
    http = anthropic.DefaultHttpxClient(limits=httpx2.Limits(max_keepalive_connections=0))
    return anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=max_retries, http_client=http)
