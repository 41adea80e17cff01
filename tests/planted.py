"""Made-up credentials, one of each shape sse-tape knows (`sse_tape.credentials.SHAPES`), to plant where secrets
may hide: each with a needle, the part of it that must never be found in a cassette, a spool or a log."""

from __future__ import annotations

import base64

_AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/planted08EXAMPLEKY"
_AWS_PAIRED = "wJalrXUtnFEMI/K7MDENG/planted06EXAMPLEKY"
assert len(_AWS_SECRET) == len(_AWS_PAIRED) == 40

PLANTED: dict[str, tuple[str, str]] = {
    "a private key": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAplanted01PEMBODY\nAAAA+/==\n-----END RSA PRIVATE KEY-----",
        "planted01PEMBODY",
    ),
    "an Anthropic API key": ("sk-ant-api03-planted02" + "x" * 30, "planted02"),
    "an OpenAI API key": ("sk-proj-planted03" + "y" * 30, "planted03"),
    "a Stripe key": ("sk_live_planted04" + "Z" * 20, "planted04"),
    "a Google API key": ("AIza" + "planted05" + "g" * 26, "planted05"),
    "an AWS access key and its secret key": (f"AKIAPLANTED000000006 {_AWS_PAIRED}", "planted06"),
    "an AWS access key": ("AKIAPLANTED000000007", "PLANTED000000007"),
    "an AWS secret key": (f"aws_secret_access_key={_AWS_SECRET}", "planted08"),
    "a GitHub token": ("ghp_planted09" + "a" * 27, "planted09"),
    "a GitLab token": ("glpat-planted10" + "b" * 11, "planted10"),
    "a Slack token": ("xoxb-planted11-0123456789", "planted11"),
    "a Hugging Face token": ("hf_planted12" + "c" * 25, "planted12"),
    "a JWT": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkMTMifQ.planted13signature", "planted13"),
    "a bearer token": ("Bearer planted14token0123", "planted14"),
    "Basic credentials": ("Basic " + base64.b64encode(b"alice:planted15").decode(), "YWxpY2U6cGxhbnRlZDE1"),
    "a password in a URL": ("https://alice:planted16@db.example/x", "planted16"),
}
"""Each shape's kind (as `check --secrets` names it): a credential of that shape, and its needle."""

NEEDLES = [needle for _, needle in PLANTED.values()]


def one_line(secret: str) -> str:
    """`secret` as a header value can hold it: on one line."""
    return secret.replace("\n", " ")
